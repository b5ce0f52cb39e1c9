"""Every transformers common test that does not run against ELMo, and why.

`run_transformers_common_tests.py` checks a run against these lists: a skipped test that
no entry names fails the run (explain it here, or make it run), and so does an entry that
names no collected test (transformers renamed or dropped it: remove the entry). A key is a
test name or a shell-style pattern for the generated variants of a parametrized test.
"""

from __future__ import annotations

SKIPS: dict[str, str] = {
    # Skipped by us: transformers' test would run and fail for a reason that does not apply to ELMo.
    "test_attention_outputs": "ELMo is a biLSTM: no attention (output_attentions=True is refused with a ValueError)",
    "test_retain_grad_hidden_states_attentions": "needs attentions; hidden_states gradients are tested in "
    "tests/hf_elmo/test_modeling_elmo.py",
    "test_resize_tokens_embeddings": "no word embedding matrix: resize_token_embeddings is a documented no-op "
    "returning the char CNN (characters need no resizing)",
    "test_resize_embeddings_untied": "no word embedding matrix (see test_resize_tokens_embeddings)",
    "test_model_get_set_embeddings": "get_input_embeddings is the pretrained char CNN, not an nn.Embedding; "
    "set_input_embeddings refuses with a ValueError",
    "test_inputs_embeds": "ELMo reads character ids; there is no inputs_embeds path",
    "test_inputs_embeds_matches_input_ids": "ELMo reads character ids; there is no inputs_embeds path",
    "test_torch_compile_for_training": "not a goal; the recurrence has its own compile_recurrence",
    "test_gradient_checkpointing_backward_compatibility": "no gradient checkpointing (a 2-layer biLSTM)",
    "test_training_gradient_checkpointing": "no gradient checkpointing (a 2-layer biLSTM)",
    "test_training_gradient_checkpointing_use_reentrant_false": "no gradient checkpointing",
    "test_training_gradient_checkpointing_use_reentrant_true": "no gradient checkpointing",
}

NOT_APPLICABLE: dict[str, str] = {
    # transformers' own check skips these for ELMo; each is about something ELMo does not have.
    "test_attn_implementation_composite_models": "no attention",
    "test_can_set_attention_dynamically": "no attention, so no attention implementation to set",
    "test_eager_matches_sdpa_inference_*": "no attention, so no SDPA path to compare with eager",
    "test_sdpa_can_dispatch_composite_models": "no attention",
    "test_sdpa_can_dispatch_non_composite_models": "no attention",
    "test_sdpa_can_dispatch_on_flash": "no attention",
    "test_sdpa_can_compile_dynamic": "no attention",
    "test_flex_attention_with_grads": "no attention",
    "test_flash_attn_*": "no attention, so no flash attention kernels",
    "test_sliding_window_mask": "no attention, so no sliding window",
    "test_multimodal_outputs_are_returned": "text only (and no attention outputs)",
    "test_bc_cache_name_forward": "no KV cache: the biLSTM reads each sentence whole; forward takes no cache",
    "test_can_capture_specific_layers_hidden_states": "ElmoModel returns its n_layers + 1 hidden states itself, "
    "not through transformers' output recording (capture_outputs hooks)",
    "test_capture_outputs_decorator": "no capture_outputs decorator (see "
    "test_can_capture_specific_layers_hidden_states)",
    "test_can_load_from_already_mapped_keys": "no weight-name conversion mapping: folders load with the names saved",
    "test_reverse_loading_mapping": "no weight-name conversion mapping (see test_can_load_from_already_mapped_keys)",
    "test_can_set_attention_dynamically_composite_model": "not a composite model",
    "test_internal_model_config_and_subconfig_are_same": "no sub-configs (lstm and char_cnn are plain dicts)",
    "test_causal_lm_loss_honors_shift_labels": "no causal language-model head",
    "test_encoder_decoder_loss_no_double_shift": "not an encoder-decoder",
    "test_eager_matches_batched_and_grouped_inference_*": "no mixture of experts, so no grouped matmul",
    "test_moe_models_record_router_logits": "no mixture of experts",
    "test_output_router_logits_from_config": "no mixture of experts",
    "test_enable_input_require_grads_with_gradient_checkpointing": "no gradient checkpointing (a 2-layer biLSTM)",
    "test_keep_in_fp32_modules": "no module has to stay in float32 (_keep_in_fp32_modules is not set)",
    "test_keep_in_fp32_modules_exist": "no module has to stay in float32",
    "test_keep_in_fp32_modules_strict_also_hardcode_fp32": "no module has to stay in float32",
    "test_model_rope_*": "no rotary position embedding: the LSTM reads the order, there are no positions",
    "test_vision_axial_rope": "no rotary position embedding, no vision",
    "test_resize_position_vector_embeddings": "no position embeddings",
    "test_resize_embeddings_untied_no_reinit_on_post_init": "no word embedding matrix (test_resize_embeddings = False)",
    "test_resize_*_with_deepspeed*": "no word embedding matrix to resize (and needs deepspeed)",
    "test_tp_plan_matches_params": "no tensor-parallel plan: the biLM is small enough for one device",
}

NEEDS_HARDWARE: dict[str, str] = {
    # Apply to ELMo, but transformers runs them only with an accelerator (or a library) that CI lacks;
    # they may pass or skip.
    "test_can_load_with_device_context_manager": "needs an accelerator",
    "test_can_load_with_global_device_set": "needs an accelerator",
    "test_cpu_offload": "needs an accelerator (offloads from it to the CPU)",
    "test_disk_offload_bin": "needs an accelerator",
    "test_disk_offload_safetensors": "needs an accelerator",
    "test_model_parallelism": "needs two accelerators",
    "test_kernels_can_load_without_crashing": "needs an accelerator and the kernels library",
    "test_kernels_can_run_without_crashing_inference": "needs an accelerator and the kernels library",
    "test_kernels_can_run_without_crashing_training": "needs an accelerator and the kernels library",
}
