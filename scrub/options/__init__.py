"""Options and configuration: every user-facing option declared once (`keys`, each a `key.Key`),
their values checked (`values`), one options model for every command, config file and the
Python API (`model`), config files (`config`), and the command line's flags built from the
keys (`flags`)."""
