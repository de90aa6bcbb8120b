"""jaxcomm: a JAX/Flax simulator of communicating deep-learning models."""

__version__ = "0.1.0"
