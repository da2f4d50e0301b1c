"""Rollouts with transformers' `generate`, for machines without vLLM (such as our GPU machine).

Requests are merged into one left-padded `generate` call of up to `max_batch` sequences: a GPU decodes 64
sequences in about the time of one. Before each call the engine waits until the queue holds a full batch, or
`batch_wait_s` at most (the generator's prompts come back one by one from verification; without the wait, the
first to return would start a small batch and the rest would wait for the whole of its decoding). Sampled-token
log-probs come from one teacher-forced forward pass over the finished sequences, in chunks, instead of keeping every
step's full-vocabulary scores (tens of GB for long answers); they are log-probs of the temperature-scaled
distribution the tokens were drawn from."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from drtriton_ray.models import load_model
from drtriton_ray.rollout.collective import SyncGroup
from drtriton_ray.rollout.engine import Sample, SamplingConfig, unpack_buckets

LOGPROB_CHUNK = 8  # sequences per teacher-forced pass: bounds the [chunk, length, vocab] logits


class _Stopped(StoppingCriteria):
    """Marks the given rows finished (generate ends once every row is)."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return self.rows


class HFEngine:
    def __init__(
        self,
        model_dir: str,
        dtype: str = "fp32",
        device: str = "cpu",
        max_batch: int = 64,
        batch_wait_s: float = 0.0,
        static_cache: bool = False,
        max_model_len: int | None = None,
    ):
        """static_cache: decode with transformers' static KV cache, which on a GPU makes `generate` compile the
        decoding step into CUDA graphs (a small model's eager decoding is likely bound by Python and kernel launches:
        ~115 ms per step for 135M parameters on an H100). A compile costs about a minute (docs/rl.md)
        and every new shape compiles again, so each call has the same shape: max_batch sequences (padded with copies
        of its last prompt, stopped after one token so that they never outlast the real ones, then dropped) and a
        cache of max_model_len tokens (prompt plus answer; a longer call grows it, and transformers keeps the
        longest it has made)."""
        self.model, self.tokenizer = load_model(model_dir, dtype)
        self.model.to(device)
        self.model.eval()
        self.device, self.max_batch, self.batch_wait_s = device, max_batch, batch_wait_s
        self.static_cache, self.max_model_len = static_cache, max_model_len
        # one thread for every generate call: CUDA graphs recorded by the compiled decoding step belong to the
        # thread that recorded them
        self._generator_thread = ThreadPoolExecutor(1, thread_name_prefix="hf-generate")
        self.weight_version = 0
        self.sync_group: SyncGroup | None = None
        # an update waits for the generation in flight (vLLM's pause "wait" mode), so no answer mixes weights
        self._lock = asyncio.Lock()
        self._pending: list[tuple[list[list[int]], SamplingConfig, asyncio.Future]] = []
        self._arrived = asyncio.Event()
        self._runner: asyncio.Task | None = None

    # -- batching front --
    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt_ids, cfg, future))
        self._arrived.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._drain())
        return await future

    def _queued(self) -> int:
        return sum(len(ids) * cfg.n for ids, cfg, _ in self._pending)

    async def _fill(self) -> None:
        """Wait until a full batch is queued, or batch_wait_s. Callers scheduled in the same tick always join; with
        nothing queued the runner ends at once (the next request starts another)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batch_wait_s
        await asyncio.sleep(0)
        while self._pending and self._queued() < self.max_batch and (left := deadline - loop.time()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return

    async def _drain(self) -> None:
        while True:
            await self._fill()
            if not self._pending:
                return
            cfg = self._pending[0][1]
            batch, rest, size = [], [], 0
            for req in self._pending:
                fits = size + len(req[0]) * cfg.n <= self.max_batch or not batch
                if req[1] == cfg and fits:
                    batch.append(req)
                    size += len(req[0]) * cfg.n
                else:
                    rest.append(req)
            self._pending = rest
            prompts = [ids for req in batch for ids in req[0]]
            try:
                async with self._lock:
                    groups = await asyncio.get_running_loop().run_in_executor(
                        self._generator_thread, self._generate, prompts, cfg
                    )
            except Exception as e:  # noqa: BLE001 - every caller of the failed batch gets the error
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            start = 0
            for ids, _, fut in batch:
                if not fut.done():
                    fut.set_result(groups[start : start + len(ids)])
                start += len(ids)

    async def warmup(self, cfg: SamplingConfig) -> None:
        """With the static cache, compile the decoding step at the one shape every call has (a minute or more on a
        GPU), before the first prompts come instead of while they wait. Any prompt will do: the compiled step sees
        only shapes."""
        if not self.static_cache:
            return
        prompt = [self.tokenizer.eos_token_id] * 8
        async with self._lock:
            await asyncio.get_running_loop().run_in_executor(
                self._generator_thread, self._generate, [prompt], replace(cfg, max_tokens=2, seed=None)
            )

    # -- the model --
    def _generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        real = len(prompt_ids)
        width = max(len(ids) for ids in prompt_ids)
        rows, cache = prompt_ids, {}
        if self.static_cache:
            rows = prompt_ids + [prompt_ids[-1]] * max(0, -(-self.max_batch // cfg.n) - real)
            cache = dict(cache_implementation="static", max_cache_len=self.max_model_len)
        inputs = torch.tensor([[pad] * (width - len(ids)) + ids for ids in rows], device=self.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in rows], device=self.device)
        sampling = (
            dict(do_sample=True, temperature=cfg.temperature, top_k=0, top_p=1.0)
            if cfg.temperature > 0
            else dict(do_sample=False)
        )
        padding = torch.arange(len(rows) * cfg.n, device=self.device) >= real * cfg.n
        with torch.no_grad():
            out = self.model.generate(
                inputs,
                attention_mask=attention,
                max_new_tokens=cfg.max_tokens,
                num_return_sequences=cfg.n,
                pad_token_id=pad,
                stopping_criteria=StoppingCriteriaList([_Stopped(padding)]),
                **cache,
                **sampling,
            )
        answers = []
        for seq in out[: real * cfg.n, width:].tolist():
            answers.append(seq[: seq.index(eos) + 1] if eos in seq else seq)
        prompts = [ids for ids in prompt_ids for _ in range(cfg.n)]
        logprobs = self._logprobs(prompts, answers, cfg.temperature or 1.0)
        samples = [
            Sample(
                a,
                lp,
                self.tokenizer.decode(a, skip_special_tokens=True),
                "stop" if a and a[-1] == eos else "length",
                self.weight_version,
            )
            for a, lp in zip(answers, logprobs)
        ]
        if self.device.startswith("cuda"):
            # hand back what PyTorch's allocator cached at the call's peak (decoding, the log-prob pass's logits): on
            # a shared GPU the trainer needs it while the engine waits (kept, it left the trainer out of memory
            # beside an idle engine, docs/rl.md). The static cache and the CUDA graphs'
            # pools stay allocated
            torch.cuda.empty_cache()
        return [samples[i * cfg.n : (i + 1) * cfg.n] for i in range(len(prompt_ids))]

    def _logprobs(self, prompts: list[list[int]], answers: list[list[int]], temperature: float) -> list[list[float]]:
        """log p(answer token | prefix) under softmax(logits / temperature), by teacher forcing."""
        out: list[list[float]] = []
        for start in range(0, len(prompts), LOGPROB_CHUNK):
            seqs = [
                p + a for p, a in zip(prompts[start : start + LOGPROB_CHUNK], answers[start : start + LOGPROB_CHUNK])
            ]
            width = max(len(s) for s in seqs)
            ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs], device=self.device)
            attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=self.device)
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
            logits.div_(temperature)  # in place: one fp32 copy of the chunk's [8, length, vocab] logits, not two
            logp = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
            for row, (p, a) in enumerate(
                zip(prompts[start : start + LOGPROB_CHUNK], answers[start : start + LOGPROB_CHUNK])
            ):
                out.append(logp[row, len(p) - 1 : len(p) - 1 + len(a)].tolist())
        return out

    async def update_weights(self, buckets: list[bytes], version: int, keys: list[str] | None = None) -> float:
        t0 = time.perf_counter()
        await self._apply(unpack_buckets(buckets), version, keys)
        return time.perf_counter() - t0

    @property
    def sync_group_id(self) -> int | None:
        return None if self.sync_group is None else self.sync_group.id

    async def join_sync_group(self, spec: dict, rank: int) -> None:
        if self.sync_group is not None:
            self.sync_group.close()
        self.sync_group = await asyncio.to_thread(SyncGroup, spec, rank, self.device)

    async def receive_weights(self, buckets: list, version: int, keys: list[str]) -> float:
        """Take part in the trainer's broadcast at once (a generation in flight goes on meanwhile), then apply."""
        t0 = time.perf_counter()
        await self._apply(await asyncio.to_thread(self.sync_group.broadcast, None, buckets), version, keys)
        return time.perf_counter() - t0

    async def _apply(self, state: dict, version: int, keys: list[str] | None) -> None:
        if keys is not None and set(keys) != set(state):
            raise RuntimeError(f"weight update incomplete: {len(set(keys) - set(state))} tensors missing")
        async with self._lock:
            self.model.load_state_dict(state, strict=True)
            self.weight_version = version

    async def shutdown(self) -> None:
        self._generator_thread.shutdown(wait=False, cancel_futures=True)
