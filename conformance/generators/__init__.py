"""The generators of the conformance vectors, one module per file of ``conformance/vectors/``
(each with a ``generate()`` returning the file's document), and :mod:`.shared`, their helpers.
``conformance/generate.py`` runs them."""
