"""A mixture-of-experts router as Mixtral's sparse block computes it: router logits, softmax in fp32, top-k experts,
weights renormalised over the chosen ones; returns (routing weights, expert indices)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

num_tokens, hidden_dim = 16, 64
num_experts, top_k = 8, 2
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_dim, num_experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False, dtype=dtype)

    def forward(self, hidden_states):
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        return routing_weights.to(hidden_states.dtype), selected_experts


def get_inputs():
    return [torch.randn(num_tokens, hidden_dim, dtype=dtype)]


def get_init_inputs():
    return [hidden_dim, num_experts, top_k]
