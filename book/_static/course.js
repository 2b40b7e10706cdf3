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
