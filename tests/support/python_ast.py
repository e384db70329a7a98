"""Parse Python source for the tests that read the project's code (guards, layout rules).

`parse` is `ast.parse` with the garbage collector held off while it runs. On Python 3.11 the
converter that builds the tree keeps its depth count in module state shared by every call; a
collection inside it can run a finalizer (py4j's, when the test process's Spark gateway has gone)
that logs a traceback, and 3.11's traceback module parses source to place its carets: the nested
parse resets the count and the outer one fails with "AST constructor recursion depth mismatch".
With no collection there is no finalizer and no nested parse, and with no Python code run inside the
parse no other thread takes the interpreter in the middle of it to start a parse of its own."""

import ast
import gc


def parse(source: str) -> ast.Module:
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()
