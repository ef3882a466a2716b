"""The background roles' loops and the worker's internals: worker, reaper, dispatcher, reconciler,
batches role, relay, intake. The API never imports them; process/ starts them."""
