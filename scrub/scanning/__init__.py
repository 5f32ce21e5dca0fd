"""The scan behind `scrub.api.scan`, in the order it runs: a dataset opened (`opening`), its
checks chosen (`selection`), each partition's chain on a worker (`runner`, giving back
`results`, its issues `encoding`), the partial results folded in (`summary`, the dataset checks'
columns in `columnstores`), each dataset's share of the run (`dataset`) and the run of several
datasets on one pool into one manifest (`run`), the splits judged across them (`splits`,
`joins`, the kept ones in `history`), the cache (`cache`, `reusing`), the fingerprint, the
baseline, and the profile's drift and contract."""
