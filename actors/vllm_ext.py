"""vLLM worker extension: the methods the rollout engine calls on every vLLM worker (``collective_rpc``).

vLLM mixes this class into its worker class when the engine is built with
``worker_extension_cls="actors.vllm_ext.RLFHWorkerExtension"``, so ``self`` is
the vLLM worker (``self.model_runner``, ``self.device``, ``self.rank``). This
module imports nothing from vLLM at import time: it is importable anywhere.

Three ways weights arrive:

* ``rlfh_load_weights(payload)``: a safetensors blob shipped with the RPC (CPU
  path: Ray object store to the engine, then vLLM's own RPC to its workers);
* ``rlfh_receive_nccl(metas)``: NCCL broadcast from policy rank 0 over a
  stateless process group set up by ``rlfh_init_weight_group`` (separate GPUs);
* ``rlfh_receive_ipc(handles_by_uuid)``: CUDA IPC handles of the policy's
  tensors on the same GPU (colocated models), zero copy across processes.
"""
from __future__ import annotations

import logging
import time

import torch

from actors.weight_sync import stateless_nccl_group

log = logging.getLogger(__name__)


class RLFHWorkerExtension:
    def _rlfh_model(self):
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def _rlfh_reload(self, weights) -> None:
        """Load an iterable of ``(hf_name, tensor)`` in place.

        vLLM's ``Worker.reload_weights`` re-runs each layer's post-load processing (the CPU backend repacks
        linear weights into kernel layouts and leaves the original parameters empty, so a bare
        ``model.load_weights`` would fail there). Older vLLMs without it get ``model.load_weights``.
        The iterable may be lazy (NCCL receives stream through it).
        """
        if hasattr(self, "reload_weights"):
            self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        else:
            self._rlfh_model().load_weights(weights=weights)

    def rlfh_load_weights(self, payload) -> int:
        """Load weights shipped with the RPC: safetensors bytes (what the engine sends: vLLM's RPC encoder turns
        bare tensors into lists) or ``[(hf_name, tensor), ...]``."""
        if isinstance(payload, (bytes, bytearray, memoryview)):
            from safetensors.torch import load as st_load
            named = list(st_load(bytes(payload)).items())
        else:
            named = [(n, t) for n, t in payload]
        self._rlfh_reload(named)
        return len(named)

    def rlfh_device_uuid(self) -> str:
        if torch.cuda.is_available() and getattr(self, "device", torch.device("cpu")).type == "cuda":
            return str(torch.cuda.get_device_properties(self.device).uuid)
        return "cpu"

    def rlfh_init_weight_group(self, master_addr: str, master_port: int, rank_offset: int, world_size: int) -> bool:
        rank = rank_offset + int(getattr(self, "rank", 0))
        self._rlfh_group = stateless_nccl_group(master_addr, master_port, rank, world_size, self.device)
        return True

    def rlfh_receive_nccl(self, metas: list) -> int:
        """Receive ``metas = [(name, dtype, shape), ...]`` in order from rank 0 and load each tensor."""
        t0 = time.time()

        def received():
            for name, dtype, shape in metas:
                buf = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
                self._rlfh_group.broadcast(buf, src=0, stream=torch.cuda.current_stream())
                yield name, buf

        self._rlfh_reload(received())
        torch.cuda.synchronize()
        log.info("rank %s received %d tensors by NCCL in %.2fs", getattr(self, "rank", "?"), len(metas),
                 time.time() - t0)
        return len(metas)

    def rlfh_receive_ipc(self, handles_by_uuid: dict) -> int:
        """Rebuild the policy's tensors from CUDA IPC handles made on THIS worker's GPU and load them."""
        uuid = self.rlfh_device_uuid()
        if uuid not in handles_by_uuid:
            raise RuntimeError(f"no policy rank shares GPU {uuid} with this vLLM worker (have "
                               f"{sorted(handles_by_uuid)}): colocate every engine worker with a policy rank, "
                               "or use the NCCL weight sync")
        dev = torch.cuda.current_device()
        named = []
        for name, (rebuild, args) in handles_by_uuid[uuid]:
            args = list(args)
            args[6] = dev  # the device ordinal as this process numbers the GPU
            named.append((name, rebuild(*args)))
        self._rlfh_reload(named)
        torch.cuda.synchronize()
        return len(named)
