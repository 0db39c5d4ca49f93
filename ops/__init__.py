"""The operator's tools, not the trainer: what a person runs beside or against a training run.

- :mod:`ops.submit`: ``rlfh submit``, send ``scripts/train.sh`` to a running Ray cluster through its job API;
- :mod:`ops.chaos`: ``rlfh chaos list|kill``, inject a real fault into a running ``rlfh train`` / ``rlfh serve``;
- :mod:`ops.soak`: ``rlfh chaos soak``, train on a local multi-node cluster under random faults;
- :mod:`ops.local_cluster`: a Ray cluster of several nodes on one machine (the soak's and the multi-node tests');
- :mod:`ops.show`: ``rlfh show``, a run's logged rollouts and the verifier's labels as one HTML page.

They sit above the trainer (:mod:`cluster`): they may import it, and nothing below imports them (``rlfh``'s
command, :mod:`rlfh.cli`, the top layer, imports them).
"""
