"""The machinery behind ``Extractor``'s entry points, apart from its public face.

- ``pipeline.base``: ``BaseExtractor``: the settings, the run machinery (``run.setup.Engine``),
  input rows -> output frame, the stop and interrupt errors, the one sync helper.
- ``pipeline.output``: ``run_to``: rows -> a file, written as they finish.
- ``pipeline.documents``: ``run_documents``: documents -> chunks -> one row per document.
"""
