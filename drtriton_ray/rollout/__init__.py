"""Rollout engines behind one async interface: vLLM (AsyncLLM) and transformers."""
