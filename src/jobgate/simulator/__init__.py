"""The simulated provider, in one place.

- `model`: the simulated model: a request's `sim` directives, the Chat Completions answer, faults;
- `wire`: its answers in the providers' other wire formats (Responses, Anthropic Messages and
  Message Batches, error bodies);
- `engine`: the provider-side state (background responses, batches, idempotent creates, the
  webhooks they owe), computed lazily from a clock;
- `profiles`: how faithfully it copies the real APIs (`realistic`, `lenient`);
- `server`, `http11`, `streams`, `rate_limits`: the `jobgate simulator` HTTP server.

`providers/simulated.py` (the built-in `sim` provider) runs the same model and engine in process.
"""
