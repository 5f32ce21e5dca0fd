"""The dataset as a whole: a profile built in the same pass (the `profile` branch provides the
producer; this placeholder lets `scrub.profile.drift` be imported before it is merged)."""
