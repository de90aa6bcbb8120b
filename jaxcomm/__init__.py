"""jaxcomm: a JAX/Flax simulator of communicating deep-learning models."""

from jaxcomm import host_memory as _host_memory

__version__ = "0.1.0"

HOST_MEMORY = _host_memory.configure()
"""The host memory mode in force: "release" (glibc's defaults) or, where ``JAXCOMM_HOST_MEMORY=keep``, "keep" (freed
blocks stay mapped for the next call, :mod:`jaxcomm.host_memory`)."""
