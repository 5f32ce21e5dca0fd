"""The scan session behind `scrub.api.scan`: each dataset's share of a scan (`dataset`), and the
run of several datasets' tasks on one pool into one manifest (`run`)."""
