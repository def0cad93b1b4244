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
import math
import numbers
import os
import warnings
from typing import Any, Mapping

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..base.errors import ArgumentError
from .specs import Catalog, Record, UnknownNameError, describe_errors, record_error
from .hf_config import HFConfigError, hf_fields

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
            heads, hidden = data.get("num_heads"), data.get("hidden_size")
            heads_ok = isinstance(heads, int) and not isinstance(heads, bool)  # true/false: refused by the field
            if data.get("num_kv_heads") is None and heads_ok:
                data["num_kv_heads"] = heads
            if data.get("head_dim") is None and heads_ok and isinstance(hidden, int) and not isinstance(hidden, bool) \
                    and heads > 0 and hidden % heads == 0 and hidden <= MAX_SIZE:
                data["head_dim"] = hidden // heads
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _whole_size(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse a size or count given as true/false, as text ("32"), as a fraction or beyond :data:`MAX_SIZE`."""
        low = _SIZE_FIELDS.get(info.field_name)
        if low is None or value is None:
            return value
        name = info.field_name
        allowed = f"a whole number in {low}..{MAX_SIZE} (2**31 - 1)"
        if isinstance(value, (bool, str, bytes)):
            raise ArgumentError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})", argument=name,
                                value=value, allowed=allowed)
        if isinstance(value, numbers.Real):
            if not math.isfinite(value) or value != math.floor(value):
                raise ArgumentError(f"{name} must be {allowed}, got {value!r}", argument=name, value=value,
                                    allowed=allowed)
            if value > MAX_SIZE:
                raise ArgumentError(f"{name} = {value!r} is out of range; allowed: {allowed}", argument=name,
                                    value=value, allowed=allowed)
        return value

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
    def num_dense_layers(self) -> int:
        """Decoder layers with a dense MLP: a mixture of experts' ``first_dense_layers`` (at most ``num_layers``),
        every layer of a dense model; the other ``num_layers - num_dense_layers`` hold the experts."""
        return min(self.first_dense_layers, self.num_layers) if self.is_moe else self.num_layers

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

    def expert_parameters(self) -> int:
        """Parameters of the routed experts of one mixture-of-experts layer (0 for a dense model)."""
        return self.num_experts * self._mlp_parameters(self.expert_size) if self.is_moe else 0

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
        dense = self.num_dense_layers if self.is_moe else 0
        return ((self.num_layers - dense) * self.layer_parameters() + dense * self.layer_parameters(moe=False)
                + self.embedding_parameters() + final_norm)

    def active_parameters(self) -> int:
        """Parameters one token passes through (MoE: ``experts_per_token`` of the experts)."""
        if not self.is_moe:
            return self.num_parameters()
        per_expert = self._mlp_parameters(self.expert_size)
        moe_layers = self.num_layers - self.num_dense_layers
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
        mtype, fields = hf_fields(config, name)
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:  # a value out of range: the record's own checks
            first = record_error(cls.__name__, exc)
            raise HFConfigError(f"the {mtype} config does not make a valid model: {describe_errors(exc)}",
                                argument=first.argument, value=first.value, allowed=first.allowed) from None


#: The largest size or count a record takes [elements]: the largest int32 (no model has a dimension near it).
MAX_SIZE = 2**31 - 1

#: the record's sizes and counts (integer fields) -> their least value; refused as booleans, text, fractions or
#: above :data:`MAX_SIZE`
_SIZE_FIELDS = {n: 1 if any(getattr(m, "gt", None) == 0 for m in f.metadata) else 0
                for n, f in TransformerConfig.model_fields.items() if f.annotation in (int, int | None)}


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
