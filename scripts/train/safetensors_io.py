"""safetensors files (the format is an 8-byte little-endian header length, a JSON header of
{name: {dtype, shape, data_offsets}}, then the raw little-endian tensor bytes), written and
read without the safetensors package, which Debian does not ship. Also HF's sharded layout
(`model-0000i-of-0000n.safetensors` + `model.safetensors.index.json`)."""

import json
import os
import struct

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
# bfloat16 tensors cannot go through numpy; their bits are moved as int16.
BITS = {"F32": torch.int32, "F16": torch.int16, "BF16": torch.int16}


def _tensor_bytes(t, dtype):
    return t.detach().to(DTYPES[dtype]).contiguous().view(BITS[dtype]).numpy().tobytes()


def write_file(path, tensors, dtype, metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = _tensor_bytes(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt", **(metadata or {})}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)
    return offset


def write_file_streaming(path, shapes, dtype, make):
    """Writes tensors one at a time (make(name, shape) -> tensor), for checkpoints too big to hold twice."""
    header, offset, size = {}, 0, torch.tensor([], dtype=DTYPES[dtype]).element_size()
    for name in sorted(shapes):
        n = size
        for d in shapes[name]:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shapes[name]), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in sorted(shapes):
            f.write(_tensor_bytes(make(name, shapes[name]), dtype))


def read_file(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        bits = torch.frombuffer(bytearray(body[a:b]), dtype=BITS[info["dtype"]])
        out[name] = bits.view(DTYPES[info["dtype"]]).reshape(info["shape"]).float()
    return out


def write_sharded(directory, tensors, dtype, num_shards):
    """Splits tensors over `num_shards` files in name order and writes the index."""
    names = sorted(tensors)
    per = -(-len(names) // num_shards)
    weight_map, total = {}, 0
    for i in range(num_shards):
        part = names[i * per : (i + 1) * per]
        file = f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors"
        total += write_file(os.path.join(directory, file), {n: tensors[n] for n in part}, dtype)
        weight_map.update({n: file for n in part})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def read_checkpoint(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_file(os.path.join(directory, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for file in files:
        out.update(read_file(os.path.join(directory, file)))
    return out
