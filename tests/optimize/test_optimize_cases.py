"""The whole-model check of `drtriton optimize`: where sizes vary it runs the example, the grown inputs and a
sequence of one token (a decode step's length, the commonest call after the swap)."""

import torch

from drtriton_ray.optimize.run import check_cases


def test_the_check_runs_a_sequence_of_one_where_sizes_vary():
    ids, mask, scale = torch.randint(0, 100, (2, 6)), torch.ones(2, 6, dtype=torch.long), 0.5
    cases = check_cases([ids], {"attention_mask": mask, "scale": scale}, dynamic=True)
    shapes = [([list(v.shape) for v in args], list(kw["attention_mask"].shape)) for args, kw in cases]
    assert shapes == [([[2, 6]], [2, 6]), ([[3, 8]], [3, 8]), ([[2, 1]], [2, 1])]
    one = cases[2]
    assert torch.equal(one[0][0], ids[:, :1]) and one[1]["scale"] == scale  # the first token; other values as given
    assert len(check_cases([ids], {}, dynamic=False)) == 1  # fixed sizes: the example alone
    assert len(check_cases([ids[:, :1]], {}, dynamic=True)) == 2  # already one token: not checked twice
