"""Decoder-only transformer shapes: a frozen record, Hugging Face config import, presets.

:class:`TransformerConfig` holds what the memory and time models need (hidden size, layers,
heads, KV heads, FFN size and type, vocabulary, tied embeddings, norm and position types,
biases, dropout, MoE experts). :meth:`TransformerConfig.from_hf` reads a Hugging Face
``config.json`` dict (or a ``transformers`` config object) of the llama, mistral, qwen2,
gemma, gpt2, gpt_neox, phi3, mixtral, qwen3, qwen2_moe, qwen3_moe, gemma2, gemma3, olmo2,
starcoder2 and deepseek_v3 families; :meth:`TransformerConfig.num_parameters`
equals ``sum(p.numel() for p in model.parameters())`` of the model Hugging Face builds from
that config. Presets live in ``specs/models/*.yaml`` (:func:`model`, :func:`list_models`).

Examples
--------
>>> import gpumodel as gm
>>> gm.model("llama-2-7b").num_parameters()
6738415616
>>> cfg = gm.TransformerConfig.from_hf({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
...                                     "n_head": 12, "vocab_size": 50257, "n_positions": 1024})
>>> cfg.num_parameters()
124439808
"""

from __future__ import annotations

import enum
import json
import os
import warnings
from typing import Any, Mapping

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..base.errors import ArgumentError, ArgumentTypeError
from .specs import Catalog, Record, UnknownNameError, describe_errors

__all__ = ["TransformerConfig", "MLPType", "NormType", "PositionType", "model", "list_models",
           "load_models", "MODEL_CATALOG", "UnknownModelError", "HFConfigError"]


class MLPType(str, enum.Enum):
    """``gated``: down(act(gate(x)) * up(x)) (llama); ``plain``: down(act(up(x))) (gpt2).

    Members are upper case; the former lower-case names are aliases (``MLPType.gated is MLPType.GATED``).
    """

    GATED = "gated"
    PLAIN = "plain"
    gated, plain = GATED, PLAIN


class NormType(str, enum.Enum):
    """``rmsnorm`` (llama) or ``layernorm`` (gpt2); lower-case member names are aliases."""

    RMSNORM = "rmsnorm"
    LAYERNORM = "layernorm"
    rmsnorm, layernorm = RMSNORM, LAYERNORM


class PositionType(str, enum.Enum):
    """Rotary (``rope``), learned absolute (``learned``) or ALiBi positions; lower-case member names are aliases."""

    ROPE = "rope"
    LEARNED = "learned"
    ALIBI = "alibi"
    rope, learned, alibi = ROPE, LEARNED, ALIBI


class UnknownModelError(UnknownNameError):
    """No model preset of that name."""


class HFConfigError(ArgumentError):
    """A Hugging Face config lacks a needed key or has an unsupported ``model_type``."""


class TransformerConfig(Record):
    """Shape of a decoder-only transformer (frozen, validated).

    Sizes are element counts; ``head_dim`` defaults to ``hidden_size // num_heads``.
    ``family`` is the Hugging Face ``model_type`` the shape follows (it decides per-op details
    of the activation memory, e.g. fused QKV projections or GELU flavour).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    name: str = "custom"
    family: str = "llama"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(default=2048, gt=0)
    mlp: MLPType = MLPType.GATED
    activation: str = "silu"
    norm: NormType = NormType.RMSNORM
    position: PositionType = PositionType.ROPE
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    parallel_residual: bool = False
    attn_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    resid_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    embd_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    moe_intermediate_size: int | None = Field(default=None, gt=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)
    shared_expert_gate: bool = False
    first_dense_layers: int = Field(default=0, ge=0)
    qk_norm: str = Field(default="none", pattern="^(none|head|full)$")
    extra_norms: int = Field(default=0, ge=0)
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    aliases: tuple[str, ...] = ()
    source: str = ""
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Fill ``num_kv_heads`` (= ``num_heads``) and ``head_dim`` (= ``hidden_size // num_heads``) when absent."""
        if isinstance(data, Mapping):
            data = dict(data)
            for key, value in data.items():  # a size given as true/false or as text ("32") is a mistake
                if key in _SIZE_FIELDS and isinstance(value, (bool, str, bytes)):
                    raise ValueError(f"{key} must be a whole number, got {value!r} ({type(value).__name__})")
            heads, hidden = data.get("num_heads"), data.get("hidden_size")
            if data.get("num_kv_heads") is None and isinstance(heads, int):
                data["num_kv_heads"] = heads
            if data.get("head_dim") is None and isinstance(heads, int) and isinstance(hidden, int) and heads > 0 \
                    and hidden % heads == 0:
                data["head_dim"] = hidden // heads
        return data

    @model_validator(mode="after")
    def _check(self) -> "TransformerConfig":
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({kv})")
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError(f"experts_per_token must be in 1..num_experts ({self.num_experts}), "
                             f"got {self.experts_per_token}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is not a multiple of num_heads "
                             f"({self.num_heads}); give head_dim")
        return self

    # ------------------------------------------------------------------ derived sizes
    @property
    def kv_heads(self) -> int:
        """Former name of :attr:`num_kv_heads`; deprecated, to be removed in the next release."""
        warnings.warn("TransformerConfig.kv_heads is deprecated; use num_kv_heads", DeprecationWarning, stacklevel=2)
        return self.num_kv_heads

    @property
    def dim_head(self) -> int:
        """Former name of :attr:`head_dim`; deprecated, to be removed in the next release."""
        warnings.warn("TransformerConfig.dim_head is deprecated; use head_dim", DeprecationWarning, stacklevel=2)
        return self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of the query projection output, ``num_heads * head_dim``."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of the key/value projection outputs, ``num_kv_heads * head_dim``."""
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed keys and values."""
        return self.kv_lora_rank > 0

    @property
    def expert_size(self) -> int:
        """FFN width of one routed expert."""
        return self.moe_intermediate_size or self.intermediate_size

    def _mlp_parameters(self, width: int) -> int:
        h = self.hidden_size
        gated = self.mlp == MLPType.GATED
        return (3 if gated else 2) * h * width + (((2 * width if gated else width) + h) if self.mlp_bias else 0)

    def attention_parameters(self) -> int:
        """Parameters of one attention block (projections, their biases, q/k norms)."""
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        if self.is_mla:
            nope, rope, v = self.head_dim - self.qk_rope_head_dim, self.qk_rope_head_dim, self.v_head_dim or self.head_dim
            heads, b = self.num_heads, self.qkv_bias
            qp = (h * self.q_lora_rank + b * self.q_lora_rank + self.q_lora_rank
                  + self.q_lora_rank * heads * (nope + rope)) if self.q_lora_rank else h * heads * (nope + rope)
            kvp = (h * (self.kv_lora_rank + rope) + b * (self.kv_lora_rank + rope) + self.kv_lora_rank
                   + self.kv_lora_rank * heads * (nope + v))
            return qp + kvp + heads * v * h + h * self.o_bias
        attn = h * (q + 2 * kv) + q * h + (q + 2 * kv) * self.qkv_bias + h * self.o_bias
        attn += {"none": 0, "head": 2 * self.head_dim, "full": q + kv}[self.qk_norm]
        return attn

    def layer_parameters(self, moe: bool | None = None) -> int:
        """Parameters of one decoder layer (norms, attention, MLP or experts + router).

        ``moe``: the MoE layer (default for MoE models) or a dense one (``first_dense_layers``).
        """
        h = self.hidden_size
        moe = self.is_moe if moe is None else moe
        norm = h * (2 if self.norm_bias else 1)
        if moe:
            mlp = self.num_experts * self._mlp_parameters(self.expert_size) + h * self.num_experts  # experts + router
            if self.shared_expert_intermediate_size:
                mlp += self._mlp_parameters(self.shared_expert_intermediate_size) + h * self.shared_expert_gate
        else:
            mlp = self._mlp_parameters(self.intermediate_size)
        return (2 + self.extra_norms) * norm + self.attention_parameters() + mlp

    def layer_matmul_parameters(self) -> int:
        """Weights of one layer that go through matmuls (cast by autocast), without biases and norms."""
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        attn = h * (q + 2 * kv) + q * h
        if self.is_mla:
            attn = self.attention_parameters()
        n = 3 if self.mlp == MLPType.GATED else 2
        mlp = n * h * self.intermediate_size
        if self.is_moe:
            mlp = self.num_experts * n * h * self.expert_size + h * self.num_experts
            mlp += n * h * self.shared_expert_intermediate_size + h * self.shared_expert_gate
        return attn + mlp

    def embedding_parameters(self) -> int:
        """Token (and learned position) embeddings, plus the LM head when it is not tied."""
        n = self.vocab_size * self.hidden_size
        if self.position == PositionType.LEARNED:
            n += self.max_position_embeddings * self.hidden_size
        if not self.tie_word_embeddings:
            n += self.vocab_size * self.hidden_size
        return n

    def num_parameters(self) -> int:
        """Total parameters, equal to ``sum(p.numel() for p in hf_model.parameters())``.

        Tied input/output embeddings count once (as PyTorch's ``parameters()`` does).
        """
        final_norm = self.hidden_size * (2 if self.norm_bias else 1)
        dense = min(self.first_dense_layers, self.num_layers) if self.is_moe else 0
        return ((self.num_layers - dense) * self.layer_parameters() + dense * self.layer_parameters(moe=False)
                + self.embedding_parameters() + final_norm)

    def active_parameters(self) -> int:
        """Parameters one token passes through (MoE: ``experts_per_token`` of the experts)."""
        if not self.is_moe:
            return self.num_parameters()
        per_expert = self._mlp_parameters(self.expert_size)
        moe_layers = self.num_layers - min(self.first_dense_layers, self.num_layers)
        return self.num_parameters() - moe_layers * per_expert * (self.num_experts - self.experts_per_token)

    # ------------------------------------------------------------------ Hugging Face import
    @classmethod
    def from_hf(cls, config: Any, name: str | None = None) -> "TransformerConfig":
        """Read a Hugging Face ``config.json`` dict, a path to one, or a ``transformers`` config object.

        Parameters
        ----------
        config : dict, str, path-like or ``transformers.PretrainedConfig``
            Supported ``model_type``: llama, mistral, qwen2, gemma, gpt2, gpt_neox, phi3, mixtral, qwen3,
            qwen2_moe, qwen3_moe, gemma2, gemma3 (its language model) / gemma3_text, olmo2, starcoder2 and
            deepseek_v3 (multi-head latent attention, shared experts, leading dense layers).
        name : str, optional
            Name for the record (default: ``_name_or_path`` or the model type).

        Raises
        ------
        HFConfigError
            Unsupported ``model_type``, a needed key is missing, a value is of the wrong kind or out of
            range, or the path cannot be read as a JSON object; the message names it.
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
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:  # a value out of range: the record's own checks
            raise HFConfigError(f"the {mtype} config does not make a valid model: {describe_errors(exc)}") from None


#: the record's sizes and counts (integer fields), refused as booleans or text
_SIZE_FIELDS = frozenset(n for n, f in TransformerConfig.model_fields.items()
                         if f.annotation in (int, int | None))


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
               tie_word_embeddings=bool(g("tie_word_embeddings", default=False)),
               activation=str(g("hidden_act", "hidden_activation", default="silu")),
               qkv_bias=bool(g("attention_bias", default=False)), o_bias=bool(g("attention_bias", default=False)),
               mlp_bias=bool(g("mlp_bias", default=False)), attn_dropout=float(g("attention_dropout", default=0.0)))
    out.update(extra)
    return out


def _qwen2(g: _Getter) -> dict:
    return _llama_like(g, qkv_bias=True, o_bias=False)


def _gemma(g: _Getter) -> dict:
    return _llama_like(g, tie_word_embeddings=bool(g("tie_word_embeddings", default=True)),
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
    return _llama_like(g, qkv_bias=bool(g("qkv_bias", default=True)), o_bias=False, **_moe_keys(g),
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
    bias = bool(g("use_bias", default=True))
    return _llama_like(g, mlp=MLPType.PLAIN, norm=NormType.LAYERNORM, norm_bias=True, qkv_bias=bias, o_bias=bias,
                       mlp_bias=bias, activation=str(g("hidden_act", default="gelu_pytorch_tanh")),
                       tie_word_embeddings=bool(g("tie_word_embeddings", default=True)),
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
                max_position_embeddings=g("n_positions", "max_position_embeddings"), mlp=MLPType.PLAIN,
                activation=str(g("activation_function", default="gelu_new")), norm=NormType.LAYERNORM,
                position=PositionType.LEARNED, tie_word_embeddings=bool(g("tie_word_embeddings", default=True)),
                qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True, fused_qkv=True,
                attn_dropout=float(g("attn_pdrop", default=0.1)), resid_dropout=float(g("resid_pdrop", default=0.1)),
                embd_dropout=float(g("embd_pdrop", default=0.1)))


def _gpt_neox(g: _Getter) -> dict:
    return dict(hidden_size=g("hidden_size"), num_layers=g("num_hidden_layers"), num_heads=g("num_attention_heads"),
                intermediate_size=g("intermediate_size"), vocab_size=g("vocab_size"),
                max_position_embeddings=g("max_position_embeddings", default=2048), mlp=MLPType.PLAIN,
                activation=str(g("hidden_act", default="gelu")), norm=NormType.LAYERNORM,
                tie_word_embeddings=bool(g("tie_word_embeddings", default=False)),
                qkv_bias=bool(g("attention_bias", default=True)), o_bias=bool(g("attention_bias", default=True)),
                mlp_bias=True, norm_bias=True, fused_qkv=True,
                parallel_residual=bool(g("use_parallel_residual", default=True)),
                attn_dropout=float(g("attention_dropout", default=0.0)), resid_dropout=float(g("hidden_dropout", default=0.0)))


_READERS = {"llama": _llama_like, "mistral": _llama_like, "qwen2": _qwen2, "gemma": _gemma,
            "phi3": _phi3, "mixtral": _mixtral, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "qwen3": _qwen3,
            "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "gemma2": _gemma2, "gemma3": _gemma3,
            "gemma3_text": _gemma3, "olmo2": _olmo2, "starcoder2": _starcoder2, "deepseek_v3": _deepseek_v3}

#: Shipped presets (``specs/models``) plus ``GPUMODEL_SPEC_PATH`` folders and :func:`load_models`.
MODEL_CATALOG: Catalog[TransformerConfig] = Catalog("models", TransformerConfig, error=UnknownModelError)


def model(name: str | TransformerConfig) -> TransformerConfig:
    """The preset called ``name`` (case-insensitive; aliases such as "llama3-8b").

    Parameters
    ----------
    name : str or TransformerConfig
        A preset name or alias (``list_models()`` lists the names); a config is returned as it is.

    Returns
    -------
    TransformerConfig
        The model's architecture: layers, widths, heads, vocabulary and experts [count].

    Raises
    ------
    UnknownModelError
        No preset of that name; the message lists the closest names.

    Examples
    --------
    >>> import gpumodel as gm
    >>> gm.model("Llama-3-8B").num_parameters()
    8030261248
    """
    return MODEL_CATALOG.get(name)


def list_models() -> list[str]:
    """Canonical names of all model presets, sorted.

    Returns
    -------
    list of str
        Preset names (what :func:`model` accepts), sorted.
    """
    return MODEL_CATALOG.names()


def load_models(path: str | os.PathLike, replace: bool = False) -> list[TransformerConfig]:
    """Validate the model records of a YAML file or folder and make them known to :func:`model`."""
    return MODEL_CATALOG.load(path, replace=replace)
