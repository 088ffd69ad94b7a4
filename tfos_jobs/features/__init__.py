"""The feature spec, written once in a config's `[features]` and the source of every other form
(spec.py, kinds.py); the vocabularies and statistics computed from the train split (vocab.py,
stats.py) and how sensor windows are standardised (standardisation.py)."""
