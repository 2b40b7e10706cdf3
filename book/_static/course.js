/* Self-Attention, Executed: the sidebar toggles work on every page width.
 *
 * pydata-sphinx-theme 0.17.1 and sphinx-book-theme 1.3.0 both bind only the FIRST
 * `.primary-toggle` / `.secondary-toggle` of a page: the one in pydata's top navbar, which the
 * book theme (and course.css) hides. The visible buttons in the article header did nothing: on a
 * phone the hamburger showed only its tooltip, and at 1400 px it did not hide the sidebar
 * (upstream: pydata-sphinx-theme issue #2451). Every other toggle forwards its click to that
 * first one, where the themes' own handlers open the drawer (phone) or hide the sidebar (desktop).
 * Remove this file when a theme pair that binds every toggle is pinned.
 */
(function () {
  function bind() {
    ["primary", "secondary"].forEach(function (kind) {
      var toggles = document.querySelectorAll("." + kind + "-toggle");
      var first = toggles[0];
      Array.prototype.slice.call(toggles, 1).forEach(function (button) {
        if (button.dataset.courseToggle) return;
        button.dataset.courseToggle = "forwarded";
        button.addEventListener("click", function (event) {
          event.preventDefault();
          event.stopPropagation();
          first.click();
        });
      });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", bind);
  } else {
    bind();
  }
})();

/* Self-Attention, Executed: the book for every reader (WCAG 2.1 AA; issue 45; checked by axe-core
 * in tests/browser on every page at 1400 px and 390 px).
 *
 * 1. Boxes that scroll sideways (code, outputs, display equations, tables, players' frames) can be
 *    reached and scrolled by keyboard: each one whose content is wider than the box gets
 *    tabindex="0", role="region" and a name ("Code, scrolls sideways"), and the class
 *    `course-scrolls`, and `course-more-right` / `course-more-left` while content hides past
 *    that edge (course.css shades the edge: the scroll cue on a phone). Re-checked after
 *    MathJax typesets and when the window is resized.
 * 2. Accessible names that contain the visible text (WCAG 2.5.3, "Label in Name"):
 *    pydata-sphinx-theme 0.17.1's search field says "Search Ctrl+K" but is named "Search", and
 *    its colour-mode button's icons carry titles ("Light") its name ("Color mode") lacks;
 *    sphinx-togglebutton names every fold "Toggle hidden content" whatever it shows ("Reference
 *    solution"). The search field and the folds are named by their visible text; the
 *    colour-mode button is named by the mode it shows.
 */
(function () {
  var SCROLLERS = [
    ["div.highlight > pre", "Code"],
    [".cell_output .output pre, .cell_output pre", "Output"],
    ["mjx-container[display='true']", "Equation"],
    [".course-player-frame", "Player frame"],
    [".pst-scrollable-table-container, .table-wrapper", "Table"],
    [".cell_output", "Output"],
  ];

  // The scroll cue: which sides of a scrolling box still hide content (course.css shades them).
  function edges(el) {
    var max = el.scrollWidth - el.clientWidth;
    el.classList.toggle("course-more-left", el.scrollLeft > 1);
    el.classList.toggle("course-more-right", el.scrollLeft < max - 1);
  }

  function markScrollers() {
    SCROLLERS.forEach(function (pair) {
      document.querySelectorAll(pair[0]).forEach(function (el) {
        var wide = el.scrollWidth > el.clientWidth + 1 &&
          ["auto", "scroll"].indexOf(getComputedStyle(el).overflowX) >= 0;
        if (wide && !el.dataset.courseScroll) {
          el.dataset.courseScroll = "1";
          el.classList.add("course-scrolls");
          edges(el);
          if (!el.dataset.courseEdges) {
            el.dataset.courseEdges = "1";
            el.addEventListener("scroll", function () { edges(el); }, {passive: true});
          }
          if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "0");
          if (!el.hasAttribute("role")) el.setAttribute("role", "region");
          if (!el.hasAttribute("aria-label")) {
            el.setAttribute("aria-label", pair[1] + ", scrolls sideways");
          }
        } else if (!wide && el.dataset.courseScroll) {
          delete el.dataset.courseScroll;
          el.classList.remove("course-scrolls", "course-more-left", "course-more-right");
          el.removeAttribute("tabindex");
          el.removeAttribute("role");
          el.removeAttribute("aria-label");
        }
      });
    });
  }

  function nameByVisibleText() {
    document.querySelectorAll(".search-button-field[aria-label]").forEach(function (b) {
      b.removeAttribute("aria-label");       // named by its text: "Search Ctrl + K"
    });
    document.querySelectorAll("details > summary[aria-label='Toggle hidden content']")
      .forEach(function (s) {
        if (s.textContent.trim()) s.removeAttribute("aria-label");   // "Reference solution"
      });
    document.querySelectorAll(".theme-switch-button").forEach(function (b) {
      if (b.dataset.courseNamed) return;
      b.dataset.courseNamed = "1";
      function name() {
        var mode = document.documentElement.dataset.mode || "auto";
        var icon = b.querySelector(".theme-switch[data-mode='" + mode + "']");
        // the icon's title ("Light"), or where Bootstrap's tooltips already moved it
        var shown = icon && (icon.getAttribute("title") ||
                             icon.getAttribute("data-bs-original-title"));
        var words = {light: "Light", dark: "Dark", auto: "System Settings"};
        b.setAttribute("aria-label", "Color mode: " + (shown || words[mode] || mode));
      }
      b.querySelectorAll(".theme-switch[title]").forEach(function (i) {
        i.setAttribute("aria-hidden", "true");
      });
      name();
      new MutationObserver(name).observe(document.documentElement,
        {attributes: true, attributeFilter: ["data-mode"]});
    });
  }

  var pending = null;
  function soon() {
    if (pending) clearTimeout(pending);
    pending = setTimeout(function () {
      pending = null;
      nameByVisibleText();
      markScrollers();
    }, 150);
  }

  function start() {
    nameByVisibleText();
    markScrollers();
    window.addEventListener("resize", soon);
    // the themes move or add controls after load (the phone's drawers): name those too
    new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        if (records[i].addedNodes.length) { soon(); return; }
      }
    }).observe(document.body, {childList: true, subtree: true});
    window.addEventListener("load", markScrollers);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markScrollers);
    } else {
      document.addEventListener("mathjax-ready", markScrollers);
      var tries = 0, poll = setInterval(function () {
        tries += 1;
        if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
          clearInterval(poll);
          MathJax.startup.promise.then(markScrollers);
        } else if (tries > 100) {
          clearInterval(poll);
        }
      }, 100);
    }
  }
  window.courseMarkScrollers = markScrollers;   // for the browser test and late content
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
