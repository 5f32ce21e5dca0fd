"""A plugin that runs a thread of its own in the process that imports it, as a plugin with a
background service would: the scan must not fork its workers from a process with another
thread running (they come from the worker server instead)."""

import threading

threading.Thread(target=threading.Event().wait, name="plugin-background", daemon=True).start()
