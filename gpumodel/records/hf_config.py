"""Hugging Face ``config.json`` readers: the :class:`~gpumodel.records.transformer.TransformerConfig` fields
that each supported ``model_type`` describes.

:func:`hf_fields` is what :meth:`TransformerConfig.from_hf <gpumodel.records.transformer.TransformerConfig.from_hf>`
calls before the record validates the fields. One reader per family maps that family's keys (``n_embd`` or
``hidden_size``, ``num_local_experts`` or ``n_routed_experts``...) to the record's fields; the enumerated fields
are given by value (``"plain"``, ``"layernorm"``, ``"learned"``), so that this module needs nothing of the record.

Examples
--------
>>> mtype, fields = hf_fields({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
...                            "vocab_size": 50257, "n_positions": 1024})
>>> mtype, fields["hidden_size"], fields["mlp"], fields["name"]
('gpt2', 768, 'plain', 'gpt2')
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from ..base.errors import ArgumentError, ArgumentTypeError

__all__ = ["HFConfigError", "hf_fields"]


class HFConfigError(ArgumentError):
    """A Hugging Face config lacks a needed key or has an unsupported ``model_type``."""


def hf_fields(config: Any, name: str | None = None) -> tuple[str, dict]:
    """The lower-case ``model_type`` of a Hugging Face config and the record fields it describes (not yet validated).

    Parameters
    ----------
    config : dict, str, path-like or ``transformers.PretrainedConfig``
        The config, the path of its ``config.json``, or a ``transformers`` config object.
    name : str, optional
        Name for the record (default: ``_name_or_path`` or the model type).

    Returns
    -------
    tuple of (str, dict)
        The ``model_type`` and the :class:`~gpumodel.records.transformer.TransformerConfig` fields (sizes in
        elements; ``family`` and ``name`` included).

    Raises
    ------
    HFConfigError
        Unsupported ``model_type``, a needed key is missing, a value is of the wrong kind, or the path cannot
        be read as a JSON object; the message names it.
    ArgumentTypeError
        ``config`` is none of the accepted kinds.
    """
    cfg = _as_dict(config)
    mtype = str(cfg.get("model_type", "")).lower()
    if mtype not in _READERS:
        supported = ", ".join(sorted(_READERS))
        raise HFConfigError(f"unsupported model_type {mtype!r}; supported: {supported}", argument="model_type",
                            value=cfg.get("model_type"), allowed=supported)
    try:
        fields = _READERS[mtype](_Getter(cfg, mtype))
    except HFConfigError:  # a key is missing: its own message
        raise
    except (TypeError, ValueError, ArithmeticError) as exc:  # a value of the wrong kind, e.g. "2048"
        raise HFConfigError(f"{mtype} config has a value of the wrong kind: {exc}") from None
    fields.setdefault("family", mtype)
    fields["name"] = name or str(cfg.get("_name_or_path") or mtype) or mtype
    return mtype, fields


class _Getter:
    def __init__(self, cfg: Mapping[str, Any], mtype: str):
        self.cfg, self.mtype = cfg, mtype

    def __call__(self, *keys: str, default: Any = ...) -> Any:
        for key in keys:
            if self.cfg.get(key) is not None:
                return self.cfg[key]
        if default is ...:
            raise HFConfigError(f"{self.mtype} config lacks the key {keys[0]!r}"
                                + (f" (or {', '.join(map(repr, keys[1:]))})" if len(keys) > 1 else ""),
                                argument=keys[0], allowed=f"a config with the key {' or '.join(map(repr, keys))}")
        return default

    def flag(self, *keys: str, default: bool) -> bool:
        """A true/false key: a JSON boolean. Text or a number is refused (``bool("false")`` is True)."""
        value = self(*keys, default=default)
        if isinstance(value, bool):
            return value
        key = next(k for k in keys if self.cfg.get(k) is not None)
        raise HFConfigError(f"{self.mtype} config: {key} must be true or false (a JSON boolean), got {value!r} "
                            f"({type(value).__name__})", argument=key, value=value,
                            allowed="true or false (a JSON boolean)")


def _as_dict(config: Any) -> dict:
    if isinstance(config, Mapping):
        return dict(config)
    if isinstance(config, (str, os.PathLike)):
        try:
            with open(config, encoding="utf-8") as fh:
                loaded = json.load(fh)
        except OSError as exc:
            raise HFConfigError(f"config: cannot read {os.fspath(config)!r}: {exc.strerror or exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HFConfigError(f"config: {os.fspath(config)!r} is not JSON: {exc}") from None
        if not isinstance(loaded, Mapping):
            raise HFConfigError(f"config: {os.fspath(config)!r} holds a JSON {type(loaded).__name__}, "
                                "not the object of a Hugging Face config.json")
        return dict(loaded)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise ArgumentTypeError(f"config must be a dict, a path to config.json or a transformers config, "
                    f"got {type(config).__name__}")


def _llama_like(g: _Getter, **extra: Any) -> dict:
    h, heads = g("hidden_size"), g("num_attention_heads")
    out = dict(hidden_size=h, num_layers=g("num_hidden_layers"), num_heads=heads,
               num_kv_heads=g("num_key_value_heads", default=heads), head_dim=g("head_dim", default=None),
               intermediate_size=g("intermediate_size"), vocab_size=g("vocab_size"),
               max_position_embeddings=g("max_position_embeddings", default=2048),
               tie_word_embeddings=g.flag("tie_word_embeddings", default=False),
               activation=str(g("hidden_act", "hidden_activation", default="silu")),
               qkv_bias=g.flag("attention_bias", default=False), o_bias=g.flag("attention_bias", default=False),
               mlp_bias=g.flag("mlp_bias", default=False), attn_dropout=float(g("attention_dropout", default=0.0)))
    out.update(extra)
    return out


def _qwen2(g: _Getter) -> dict:
    return _llama_like(g, qkv_bias=True, o_bias=False)


def _gemma(g: _Getter) -> dict:
    return _llama_like(g, tie_word_embeddings=g.flag("tie_word_embeddings", default=True),
                       activation=str(g("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")))


def _phi3(g: _Getter) -> dict:
    return _llama_like(g, fused_qkv=True, fused_gate_up=True, resid_dropout=float(g("resid_pdrop", default=0.0)),
                       embd_dropout=float(g("embd_pdrop", default=0.0)))


def _mixtral(g: _Getter) -> dict:
    return _llama_like(g, num_experts=g("num_local_experts"), experts_per_token=g("num_experts_per_tok"))


def _qwen3(g: _Getter) -> dict:
    return _llama_like(g, qk_norm="head")


def _moe_keys(g: _Getter) -> dict:
    return dict(num_experts=g("num_experts", "num_local_experts", "n_routed_experts"),
                experts_per_token=g("num_experts_per_tok"), moe_intermediate_size=g("moe_intermediate_size"))


def _qwen2_moe(g: _Getter) -> dict:
    if g("decoder_sparse_step", default=1) != 1 or g("mlp_only_layers", default=[]):
        raise HFConfigError("qwen2_moe configs with dense layers between MoE layers (decoder_sparse_step != 1 or "
                            "mlp_only_layers) are not supported")
    return _llama_like(g, qkv_bias=g.flag("qkv_bias", default=True), o_bias=False, **_moe_keys(g),
                       shared_expert_intermediate_size=g("shared_expert_intermediate_size", default=0),
                       shared_expert_gate=bool(g("shared_expert_intermediate_size", default=0)))


def _qwen3_moe(g: _Getter) -> dict:
    if g("decoder_sparse_step", default=1) != 1 or g("mlp_only_layers", default=[]):
        raise HFConfigError("qwen3_moe configs with dense layers between MoE layers (decoder_sparse_step != 1 or "
                            "mlp_only_layers) are not supported")
    return _llama_like(g, qk_norm="head", **_moe_keys(g))


def _gemma2(g: _Getter) -> dict:
    return _gemma(g) | dict(extra_norms=2)


def _gemma3(g: _Getter) -> dict:
    text = g.cfg.get("text_config")
    if isinstance(text, Mapping):  # the multimodal Gemma 3: its language model (the vision tower is not counted)
        g = _Getter({"model_type": "gemma3_text", **text}, "gemma3")
    return _gemma(g) | dict(extra_norms=2, qk_norm="head", family="gemma3")


def _olmo2(g: _Getter) -> dict:  # post-norms (after attention and MLP) instead of pre-norms; q/k norm over all heads
    return _llama_like(g, qk_norm="full")


def _starcoder2(g: _Getter) -> dict:
    bias = g.flag("use_bias", default=True)
    return _llama_like(g, mlp="plain", norm="layernorm", norm_bias=True, qkv_bias=bias, o_bias=bias,
                       mlp_bias=bias, activation=str(g("hidden_act", default="gelu_pytorch_tanh")),
                       tie_word_embeddings=g.flag("tie_word_embeddings", default=True),
                       resid_dropout=float(g("residual_dropout", default=0.0)),
                       embd_dropout=float(g("embedding_dropout", default=0.0)))


def _deepseek_v3(g: _Getter) -> dict:
    nope, rope = g("qk_nope_head_dim"), g("qk_rope_head_dim")
    return _llama_like(g, head_dim=nope + rope, v_head_dim=g("v_head_dim"), qk_rope_head_dim=rope,
                       q_lora_rank=g("q_lora_rank", default=0) or 0, kv_lora_rank=g("kv_lora_rank"),
                       num_kv_heads=g("num_attention_heads"), **_moe_keys(g),
                       shared_expert_intermediate_size=g("n_shared_experts", default=0) * g("moe_intermediate_size"),
                       first_dense_layers=g("first_k_dense_replace", default=0))


def _gpt2(g: _Getter) -> dict:
    h = g("n_embd", "hidden_size")
    return dict(hidden_size=h, num_layers=g("n_layer", "num_hidden_layers"), num_heads=g("n_head", "num_attention_heads"),
                intermediate_size=g("n_inner", default=None) or 4 * h, vocab_size=g("vocab_size"),
                max_position_embeddings=g("n_positions", "max_position_embeddings"), mlp="plain",
                activation=str(g("activation_function", default="gelu_new")), norm="layernorm",
                position="learned", tie_word_embeddings=g.flag("tie_word_embeddings", default=True),
                qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True, fused_qkv=True,
                attn_dropout=float(g("attn_pdrop", default=0.1)), resid_dropout=float(g("resid_pdrop", default=0.1)),
                embd_dropout=float(g("embd_pdrop", default=0.1)))


def _gpt_neox(g: _Getter) -> dict:
    return dict(hidden_size=g("hidden_size"), num_layers=g("num_hidden_layers"), num_heads=g("num_attention_heads"),
                intermediate_size=g("intermediate_size"), vocab_size=g("vocab_size"),
                max_position_embeddings=g("max_position_embeddings", default=2048), mlp="plain",
                activation=str(g("hidden_act", default="gelu")), norm="layernorm",
                tie_word_embeddings=g.flag("tie_word_embeddings", default=False),
                qkv_bias=g.flag("attention_bias", default=True), o_bias=g.flag("attention_bias", default=True),
                mlp_bias=True, norm_bias=True, fused_qkv=True,
                parallel_residual=g.flag("use_parallel_residual", default=True),
                attn_dropout=float(g("attention_dropout", default=0.0)), resid_dropout=float(g("hidden_dropout", default=0.0)))


_READERS = {"llama": _llama_like, "mistral": _llama_like, "qwen2": _qwen2, "gemma": _gemma,
            "phi3": _phi3, "mixtral": _mixtral, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "qwen3": _qwen3,
            "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "gemma2": _gemma2, "gemma3": _gemma3,
            "gemma3_text": _gemma3, "olmo2": _olmo2, "starcoder2": _starcoder2, "deepseek_v3": _deepseek_v3}
