#!/usr/bin/env python3
"""Writes the fuzzers' checked-in seeds (fuzz/run passes seeds/TARGET to its target): the
shapes of issue 21's string attacks, at and past each bound of rig_proto's bounds.rs.
Run from fuzz/: python3 seeds/make.py. The encodings are bincode 2's standard ones."""
import struct

def v(n):
    if n < 251: return bytes([n])
    if n < 1 << 16: return b'\xfb' + struct.pack('<H', n)
    if n < 1 << 32: return b'\xfc' + struct.pack('<I', n)
    return b'\xfd' + struct.pack('<Q', n)

def s(x):
    b = x.encode()
    return v(len(b)) + b

MAGIC = int.from_bytes(b'rigproto', 'little')
VERSION = 6
def hello(prog): return v(MAGIC) + v(VERSION) + s(prog)
def frame(p, announce=None):
    return struct.pack('<I', len(p) if announce is None else announce) + bytes(4) + p
# Request variants by index: ResolveEntry 7, Prepare 8, StopDevice 13 (device 1, image/last 0).
def resolve(name): return v(7) + v(1) + v(0) + s(name)
def prepare(name): return v(8) + v(1) + v(0) + s(name)
def stop(why): return v(13) + v(1) + v(0) + b'\x01' + s(why)

H = frame(hello('rig-demo'))
frames = {
    'hello_program_at_bound': frame(hello('p' * 256)),
    'hello_program_past_bound': frame(hello('p' * 257)),
    'hello_program_two_byte_chars_at_bound': frame(hello('\u00e9' * 128)),
    'hello_frame_sized_announced': frame(hello('x' * 4000), announce=(16 << 20) - 64),
    'hello_past_most_hello': frame(hello('x' * 4100)),
    'resolve_entry_name_at_bound': H + frame(resolve('k' * 4096)),
    'resolve_entry_name_past_bound': H + frame(resolve('k' * 4097)),
    'prepare_name_past_bound': H + frame(prepare('\u00e9' * 2049)),
    'stop_reason_at_bound': H + frame(stop('r' * 1024)),
    'stop_reason_past_bound': H + frame(stop('r' * 1025)),
}
for k, b in frames.items():
    # Plan byte 0: the first frame is read as rigd reads a hello.
    open(f'seeds/frames/{k}', 'wb').write(b'\x00' + b)

# fuzz_targets/requests.rs reads: client, device, op, the op's bytes, a descriptor byte.
# Input::text reads a kind (0 short, 1 at the bound, 2 one past, 3 far past), a length byte
# for kinds 0 and 3, then 0 for two-byte characters.
def text(kind, n=0, two=False):
    return bytes([kind]) + (bytes([n]) if kind in (0, 3) else b'') + bytes([0 if two else 1])
def op(client, dev, code, body): return bytes([client, dev, code]) + body + b'\x01'
OPEN = op(0, 0, 0, b'\x00')
requests = {
    'resolve_entry_name_past_bound': OPEN + op(0, 1, 7, b'\x00\x01' + text(2)),
    'resolve_entry_name_far_past_bound': OPEN + op(0, 1, 7, b'\x00\x01' + text(3, 255, True)),
    'prepare_name_at_bound': OPEN + op(0, 1, 17, b'\x00' + text(1, two=True)),
    'stop_reason_past_bound': OPEN + op(0, 1, 5, bytes(8) + b'\x00' + text(2, two=True)),
    'stop_reason_at_bound_then_status': OPEN + op(0, 1, 5, bytes(8) + b'\x00' + text(1)) + op(0, 1, 13, b''),
    'long_named_client_lists_clients': op(3, 0, 0, b'\x00') + op(3, 0, 16, b''),
}
for k, b in requests.items():
    open(f'seeds/requests/{k}', 'wb').write(b)
