"""The composition root: one jobgate process built from settings (`runtime`), the roles it can
run declared as data (`roles`), and the HTTP server as one of them (`api_server`). The only
package that knows every layer; the CLI, the benchmarks and the tests import it, nothing else.
"""
