"""Deployment manifests (the repository's cluster/ folder), checked offline against what would judge them at launch.

Ray cluster launcher configs (`provider:`) meet Ray's own launcher schema and Ray's own config preparation; KubeRay
RayJob and RayService manifests meet the v1 openAPIV3Schema of KubeRay's CRDs (schemas/, read the way the API
server reads a structural schema); what runs on the cluster is checked too: a RayService's Serve config against
Ray Serve's schema and the service's settings, a RayJob's training config against the RL config. `check.py` is the
entry point, `drtriton check-cluster` prints its findings."""
