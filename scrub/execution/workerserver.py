"""Imported by the worker server (multiprocessing's forkserver) only, as its first preload:
the server dies with the scan that started it, and tells the workers it forks its pid so that
each of them dies with it (see `scrub.execution.lifeline`). Never import this in a scan's own process."""

from scrub.execution.lifeline import expected_parent, hand_down, tie_to_parent

tie_to_parent(expected_parent())
hand_down()
