"""drtriton-ray: DRTriton (CSP-DAG synthesis, verified Triton, curriculum RL, test-time search) on Ray."""
