"""Tests of the roles' loops and the worker's internals."""
