"""One instrumented RAG app per module (generate.py runs them): DESCRIPTION and run(stub)."""
