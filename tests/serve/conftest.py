"""One real local Ray Serve per test module of the serve suite (module scope: Serve starts once per module):
serve_helpers.running_service with a CPU verifier and no model."""

import pytest
from serve_helpers import running_service


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A CPU service without a model (the lowering is the only source)."""
    with running_service(tmp_path_factory.mktemp("serve")) as running:
        yield running
