"""Sphinx configuration of jaxcomm's API reference, built from the docstrings (``python -m sphinx -W docs out``)."""

project = "jaxcomm"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.autosummary"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures carry them; the docstrings say the shapes
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" sections as fields of their class, not objects of their own
default_role = "code"
nitpicky = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
