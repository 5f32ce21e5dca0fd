"""`fix` and `restore`: the cleaned copy and the quarantine (`cleaning`), where they are written
(`destinations`, published as `outputs` on disk, or by `scrub.storage.buckets` in object
storage), the checksums that prove nothing was lost (`ledger`), the scan a fix reuses (`reuse`),
and `restoring`."""
