"""``densegate run --model DIR --prompt TEXT``: a checkpoint's greedy continuation of each prompt.

Text prompts (``--prompt``) are encoded with the checkpoint's ``tokenizer.json``
and token-id prompts (``--prompt-ids``) need none; every request is printed
with its output ids, its text when a tokenizer is there, and why it finished
(``stop``: an EOS or stop id; ``length``: ``--max-tokens``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from densegate.cli.options import engine_config

__all__ = ["generate", "parse_ids"]


def parse_ids(text: str) -> list[int]:
    """``"1 15, 42"`` -> ``[1, 15, 42]``; a clear error naming a bad entry (not an int >= 0)."""
    out = []
    for part in text.replace(",", " ").split():
        try:
            value = int(part)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"--prompt-ids: {part!r} in {text!r} is not a token id")
        out.append(value)
    return out


def generate(args: argparse.Namespace) -> int:
    """Run every prompt to completion; 0 when each finished, 1 if one ended otherwise, 2 on
    bad input (no --model, no tokenizer for text, a refused checkpoint, a prompt or stop id
    the model could never serve), found before the weights load."""
    from importlib.util import find_spec

    from densegate.impl.engine import Engine
    from densegate.impl.runners.hf_config import read_config
    from densegate.impl.runners.tokenizer import TextCodec
    from densegate.impl.sched.admission import rejection

    if not args.model:
        print("densegate run: --prompt and --prompt-ids need --model DIR", file=sys.stderr)
        return 2
    try:
        config = engine_config(args, "torch")  # reads config.json, not the weights
        vocab = read_config(args.model).config.vocab_size
        bad = next((t for t in args.stop_token_id if t >= vocab), None)
        if bad is not None:
            raise ValueError(f"--stop-token-id {bad} is outside the vocabulary [0, {vocab})")
        text = TextCodec(args.model)
        # Token ids need no tokenizer: the output is decoded to text only where one loads.
        decoded = text.available and find_spec("tokenizers") is not None
        if decoded or args.prompt:
            text.load()  # a bad tokenizer.json is refused now, not after the run
        prompts = [text.encode(t) for t in args.prompt or []]
        prompts += [parse_ids(s) for s in args.prompt_ids or []]
        for i, p in enumerate(prompts):
            why = rejection(config, vocab, p, args.max_tokens)
            if why is not None:
                raise ValueError(f"prompt {i} cannot be served: {why}")
        engine = Engine(config)
        rids = [
            engine.add_request(
                p, args.max_tokens, stop_token_ids=args.stop_token_id, ignore_eos=args.ignore_eos
            )
            for p in prompts
        ]
        while engine.has_unfinished():
            engine.step()
        results: list[dict[str, Any]] = []
        for rid, prompt in zip(rids, prompts, strict=True):
            r = engine.request(rid)
            item: dict[str, Any] = {
                "prompt_ids": prompt,
                "output_ids": list(r.output_token_ids),
                "status": r.status.value,
                "finish_reason": r.finish_reason,
            }
            if decoded:
                item["text"] = text.decode(r.output_token_ids)
            results.append(item)
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": str(args.model), "requests": results}))
    else:
        for i, item in enumerate(results):
            print(f"request {i} ({item['status']}: {item['finish_reason']})")
            print("  tokens: " + " ".join(map(str, item["output_ids"])))
            if "text" in item:
                print(f"  text: {item['text']!r}")
    return 0 if all(item["status"] == "finished" for item in results) else 1
