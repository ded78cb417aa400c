#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from scratch: small valid files
of each format plus a few near-misses, so every run starts from inputs that reach deep code.
Standard library only. Run from anywhere: python3 fuzz/make_seeds.py"""
import json
import os
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(entries, metadata=None, pad=True):
    header, blob = {}, b""
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def npy(descr, shape, data, major=1):
    dims = ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "")
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    pre = 10 if major == 1 else 12
    d += " " * (-(pre + len(d) + 1) % 64) + "\n"
    size = struct.pack("<H", len(d)) if major == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([major, 0]) + size + d.encode() + data


def gguf_string(text):
    data = text if isinstance(text, bytes) else text.encode()
    return struct.pack("<Q", len(data)) + data


# GGUF value types: uint8 0, int8 1, uint16 2, int16 3, uint32 4, int32 5, float32 6, bool 7,
# string 8, array 9, uint64 10, int64 11, float64 12.
GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_value(vtype, value):
    if vtype == 8:
        return struct.pack("<I", 8) + gguf_string(value)
    if vtype == 9:
        etype, items = value
        body = b"".join(gguf_string(v) if etype == 8 else struct.pack(GGUF_SCALARS[etype], v) for v in items)
        return struct.pack("<IIQ", 9, etype, len(items)) + body
    return struct.pack("<I", vtype) + struct.pack(GGUF_SCALARS[vtype], value)


def gguf(kvs, tensors, alignment=32, version=3):
    """kvs: [(key, type, value)]; tensors: [(name, ne, ggml_type, data bytes)], laid out in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        out += gguf_string(key) + gguf_value(vtype, value)
    blob, offsets = b"", []
    for name, ne, gtype, data in tensors:
        blob += b"\0" * (-len(blob) % alignment)
        offsets.append(len(blob))
        blob += data
    for (name, ne, gtype, data), offset in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", gtype, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + blob


def gpt2_byte_tokens():
    """GPT-2's bytes_to_unicode stand-ins, byte order."""
    out, nxt = [], 0x100
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            out.append(chr(b))
        else:
            out.append(chr(nxt))
            nxt += 1
    return out


def main():
    f32 = struct.pack("<6f", 1, -2, 3.5, 0, 1e-3, 7)
    put("safetensors", "f32_f16_bf16", safetensors([
        ("a", "F32", [2, 3], f32), ("b", "F16", [2], struct.pack("<2H", 0x3C00, 0x0001)),
        ("c", "BF16", [1, 2], struct.pack("<2H", 0x3F80, 0xFF80))], {"format": "pt"}))
    put("safetensors", "i64_scalar", safetensors([
        ("ids", "I64", [3], struct.pack("<3q", 0, 1, 2)), ("s", "F32", [], struct.pack("<f", 2))]))
    put("safetensors", "empty", safetensors([]))
    put("safetensors", "zero_size", safetensors([("z", "F32", [0, 4], b""), ("u", "U8", [2], b"\x01\x02")]))

    put("npy", "f4_2x3", npy("<f4", [2, 3], f32))
    put("npy", "f8_4", npy("<f8", [4], struct.pack("<4d", 1, 2, 3, 4)))
    put("npy", "f4_v2", npy("<f4", [1, 1, 2], struct.pack("<2f", 5, 6), major=2))
    put("npy", "f4_v3_empty", npy("<f4", [0, 3], b"", major=3))
    put("npy", "f8_rank4", npy("<f8", [1, 2, 1, 1], struct.pack("<2d", -1, 1)))

    config = json.dumps({"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                         "num_attention_heads": 12, "intermediate_size": 1536,
                         "max_position_embeddings": 512, "type_vocab_size": 2,
                         "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert",
                         "position_embedding_type": "absolute"})
    tok = json.dumps({"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True})
    sbert = json.dumps({"max_seq_length": 256, "do_lower_case": False})
    pooling = json.dumps({"word_embedding_dimension": 384, "pooling_mode_cls_token": False,
                          "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                          "pooling_mode_mean_sqrt_len_tokens": False})
    modules = json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                          {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    put("encoder_config", "minilm_all", "\n##\n".join([config, tok, sbert, pooling, modules]))
    put("encoder_config", "config_only", config)
    put("encoder_config", "config_tok", "\n##\n".join([config, tok]))

    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", "##ing", "un",
                       "##aff", "##able", ",", ".", "!", "é", "e", "中", "naïve", "na", "##ive"])
    put("wordpiece", "ascii", bytes([0b11111111]) + vocab.encode() + b"\0Hello, worlds! unaffable running.")
    put("wordpiece", "unicode", bytes([0b00000111]) + vocab.encode() +
        "\0Naïve café 中文 Ǆ ΣΑΣ \u00a0tab\there\u200b\r\n".encode())
    put("wordpiece", "invalid_utf8", bytes([0b01000011]) + b"[PAD]\n[UNK]\n[CLS]\n[SEP]\nab\n##cd\0ab\xff\xc0cd \xed\xa0\x80 \xf4\x90")
    put("wordpiece", "cased", bytes([0]) + b"[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nHello\0Hello HELLO")

    put("sts", "three", "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n"
        "main-news\theadlines\t2013\t0002\t0.8\tA man \"plays\".\tA woman cuts.\textra\tfields\r\n\n"
        "main-forum\tdeft\t2014\t0003\t3\tOne.\tTwo.\n")
    put("sts", "bad_score", "g\tf\ty\ti\tnan\ta\tb\n")
    put("sts", "short_line", "g\tf\ty\ti\t1.0\ta\n")

    put("attention_options", "lengths", "3,1\n0.5\n-1\n-1\n\x01\x04\x04\x01\x03\x00")
    put("attention_options", "window_causal", "\n\n2\n0\n\x02\x05\x06\x03\x08\x01\x07\x09\x0b")
    put("attention_options", "bias_masked", "2\n\n\n\n\x00\x03\x05\x05\x04\x02\x01\x02\x03\xff\x0f\xf0")
    put("attention_options", "bad", "1,,2\n1e400\nx\n\n")

    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + gpt2_byte_tokens() + ["he", "ll", "hell", "\u0120w", "or"]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    tokenizer = [("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, "smollm"),
                 ("tokenizer.ggml.tokens", 9, (8, tokens)), ("tokenizer.ggml.token_type", 9, (5, types)),
                 ("tokenizer.ggml.merges", 9, (8, ["h e", "l l", "he ll", "\u0120 w", "o r"])),
                 ("tokenizer.ggml.bos_token_id", 4, 1), ("tokenizer.ggml.eos_token_id", 4, 2)]
    q8_0 = struct.pack("<H", 0x3800) + bytes(range(0, 64, 2))
    q4_1 = struct.pack("<HH", 0x3C00, 0xBC00) + bytes(range(16))
    put("gguf", "llama_tiny", gguf([("general.architecture", 8, "llama"), ("llama.block_count", 4, 1)] + tokenizer,
                                   [("token_embd.weight", [32, 2], 8, q8_0 * 2), ("blk.0.attn_q.weight", [32, 1], 3, q4_1),
                                    ("output_norm.weight", [4], 0, struct.pack("<4f", 1, 2, 3, 4)),
                                    ("h", [2, 2], 1, struct.pack("<4H", 0x3C00, 0x0001, 0x7C00, 0x8000))]))
    put("gguf", "every_type", gguf([("u8", 0, 255), ("i8", 1, -1), ("u16", 2, 65535), ("i16", 3, -2), ("u32", 4, 7),
                                    ("i32", 5, -3), ("f32", 6, 1.5), ("b", 7, 1), ("s", 8, "text"), ("u64", 10, 2**63),
                                    ("i64", 11, -4), ("f64", 12, 2.5), ("a_f32", 9, (6, [1.0, -1.0])),
                                    ("a_u64", 9, (10, [1, 2**63])), ("a_b", 9, (7, [0, 1])), ("a_s", 9, (8, ["x", ""])),
                                    ("general.alignment", 4, 64)],
                                   [("k", [256], 12, bytes(144)), ("z", [0, 3], 0, b"")], alignment=64))
    put("gguf", "v2_empty", gguf([], [], version=2))
    put("gguf", "truncated", gguf([("general.name", 8, "cut")], [("w", [32], 3, q4_1)])[:-7])

    put("bpe", "merges", "h e\nl l\nhe ll\nhell o\n\u0120 w\no r\nw or\n<|s|>\0hello world <|s|> 42 héllo\xff")
    put("bpe", "special", "<|im_start|>\n<|im_end|>\n<a\n\u0120 \u0120\0<|im_start|>user\nhi<|im_end|>   x")
    put("bpe", "unicode", "\u00e4 \u00b8\0\u4e2d\u6587 \U0001F600 \u0661\u0662 \t\r\n  \u3000end".encode("utf-8", "surrogatepass"))

    # headcount serve's request bodies (tools/headcount/serve/requests.h): valid ones of each route,
    # and near-misses (a token array, a wrong type, malformed JSON).
    put("serve_request", "openai_list", json.dumps({"input": ["A man plays a guitar.", ""], "model": "all-MiniLM-L6-v2",
                                                   "encoding_format": "base64", "dimensions": 384}))
    put("serve_request", "tei", json.dumps({"inputs": "What is Deep Learning?", "truncate": True, "normalize": False,
                                           "add_special_tokens": False}))
    put("serve_request", "token_array", json.dumps({"input": [[101, 2023, 102]], "model": 7, "encoding_format": "hex"}))
    put("serve_request", "malformed", r'{"inputs": ["caf\u00e9", "\ud800"], "truncate": "yes"')


if __name__ == "__main__":
    main()
