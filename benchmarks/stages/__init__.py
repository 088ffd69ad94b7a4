"""The stages of `tfos bench`, one module per area: data (generate, prepare), writes and the input
pipeline, training, serving. Each is a function of the run's `Bench`."""
