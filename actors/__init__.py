"""Ray actor groups of the RLFH trainer (nothing is imported here: ``import actors`` stays light).

==================  ==========================================================================================
module              what it holds
==================  ==========================================================================================
``types``           ``RolloutSample``, ``Batch``, ``make_batch`` / ``split_batch`` / ``concat_batches``,
                    ``token_offsets`` (linear-time char spans per token)
``group``           ``ActorGroup`` (ranks, ``run`` / ``run_async`` / ``dispatch``), ``plan_placement``,
                    ``create_groups`` -> ``Groups(policy, critic, reference, rollout, placement)``
``policy``          ``PolicyActor``: DeepSpeed (ZeRO 0-3, LoRA, grad checkpointing), ``logprobs``,
                    ``train_step`` (PPO), ``state_dict_for_sync``, checkpoints, ``save_hf``
``critic``          ``CriticActor``: value head on a backbone, ``values``, ``train_step``
``reference``       ``ReferenceActor``: frozen ``logprobs``
``rollout``         ``HFRolloutEngine`` / ``VLLMRolloutEngine``: ``generate``, ``chat``, ``update_weights``;
                    ``generate_on_engines`` shards prompts over several engines
``weight_sync``     ``sync_weights(policy_group, engines)``: object store (CPU), NCCL or CUDA IPC (GPU)
``vllm_ext``        the vLLM worker extension that receives weights
``optional``        import guards for the ``vllm`` / ``flash-attn`` extras
``model_loader``    offline model resolution and loading
==================  ==========================================================================================
"""
