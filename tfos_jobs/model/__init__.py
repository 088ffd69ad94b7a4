"""The Keras models built from the feature spec (builder.py: wide & deep, the recurrent
autoencoder in sequence.py, a user's own function), their layers, training steps and gradient
exchange, and the SavedModel export with its serving signatures."""
