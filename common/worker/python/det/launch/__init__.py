"""Launchers for det entrypoints (Determined's det.launch.*)."""
