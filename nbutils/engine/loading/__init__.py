"""Loading models, split by job: ``embedded`` (the GGUF models shipped in packages), ``quantization`` (bitsandbytes),
``host`` (device, CPU bf16, threads, memory), ``load`` (carrying out resolved settings)."""
