"""JupyterLab's configuration for `make lab` (and the browser test): `--config=` this file.

It lives in the repository, so it never touches your own Jupyter configuration (~/.jupyter):
no news prompt and no update check (the learner's workspace makes no request to the internet),
and the setting defaults of settings/overrides.json (JupyterLab's "app settings" folder).
"""

from pathlib import Path

c = get_config()  # noqa: F821  (traitlets' config-file namespace)

HERE = Path(__file__).resolve().parent
# "Would you like to get notified about official Jupyter news?": never asked, never fetched.
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
c.LabApp.app_settings_dir = str(HERE / "settings")
