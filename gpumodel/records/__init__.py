"""Records: frozen, validated facts with their sources, and the catalogs that load them from YAML.

* :mod:`~gpumodel.records.gpu` - :class:`GPUSpec` and the GPU catalog;
* :mod:`~gpumodel.records.arch` - per-compute-capability occupancy limits (:class:`ArchLimits`);
* :mod:`~gpumodel.records.dtypes` - number formats;
* :mod:`~gpumodel.records.transformer` - :class:`TransformerConfig` (Hugging Face configs: :mod:`~gpumodel.records.hf_config`);
* :mod:`~gpumodel.records.system` - :class:`SystemSpec`: GPUs per node, fabrics, node power;
* :mod:`~gpumodel.records.specs` - YAML loading (``yaml.safe_load``), the :class:`Catalog`, the record base.
"""
