"""The conversion service on Ray Serve (docs/serve.md): an Api ingress (FastAPI: submit, status, result, the page),
a Search deployment (one `search` per request), an optional Policy deployment (the model) and Verifier replicas
(a sandboxed WorkerPool each). User source stays text until it reaches a verifier worker: no process of this
package imports or executes it. `build_app(args)` in drtriton_ray.serve.app composes them."""
