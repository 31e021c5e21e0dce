//! The layouts of the shared pages: where each word lies in the memory that rigd, the
//! client and the queue processors (GPU or simulator) share. Each fact is stated here once;
//! `rigd` lays the pages out by it, `rig-client` reads them by it, `rig-sim` and `rig-proto`
//! check against it. The `const` assertions below check the offsets at compile time.
//!
//! # Control page
//!
//! [`CONTROL_PAGE_BYTES`] of Pinned memory the GPU also addresses, one per device:
//!
//! | offset | bytes | what | written by |
//! |---|---|---|---|
//! | [`TIMELINE_WORD_OFFSET`] = 0 | 8 | the timeline word | the queues' releases; rigd at stop and loss |
//! | [`SUBMITTED_OFFSET`] = 64 | 8 | the last value the client gave to submit | client (release) |
//! | [`LOST_OFFSET`] = 72 | 4 | nonzero once rigd lost the device | rigd (release) |
//!
//! The timeline word has a cache line of its own, as the GPU writes it while the client
//! writes the submitted value.
//!
//! A waiting client sleeps on two futex words of the page ([`crate::futex::wait_any`]): the
//! timeline word's low half ([`TIMELINE_FUTEX_OFFSET`]), which the path's interrupt handler
//! wakes after a release that interrupts (no GPU wakes a futex; `rigd::path::wake`), and the
//! lost flag, which rigd wakes when it raises it. rigd also wakes the timeline word when its
//! stop writes it.
//!
//! # A queue's memory
//!
//! A queue's memfd holds its ring, then one [`POSITIONS_PAGE_BYTES`] page of positions:
//!
//! | offset | bytes | what | written by |
//! |---|---|---|---|
//! | 0 | ring | packets | client |
//! | ring + [`READ_AFTER_RING`] = ring | 8 | read position | the queue |
//! | ring + [`WRITE_AFTER_RING`] = ring + 64 | 8 | write position | client |
//!
//! Positions are 64-bit words that only grow and index the ring modulo its size, in units
//! of the queue's packets: [`PM4_POSITION_UNIT`] (dwords), [`SDMA_POSITION_UNIT`] (bytes),
//! [`AQL_POSITION_UNIT`] (64-byte packets). A ring is a power of two of at least
//! [`MIN_RING_BYTES`].
//!
//! # Doorbell page
//!
//! [`DOORBELL_PAGE_BYTES`] cut into [`DOORBELLS_PER_PAGE`] slots of
//! [`DOORBELL_SLOT_BYTES`], one cache line each, so that two queues' doorbells never share
//! a line. A slot holds the value ([`DOORBELL_VALUE_OFFSET`], 8 bytes) and the processor's
//! sleeping word ([`DOORBELL_SLEEPING_OFFSET`], 4 bytes); see [`crate::doorbell`] for the
//! protocol.
//!
//! # Argument segment
//!
//! A power of two of at least [`MIN_SEGMENT_BYTES`] of Pinned memory, used as a ring of
//! bytes by the client's launches.

/// Bytes of a cache line, the unit that words written by different sides are kept apart by.
pub const CACHE_LINE_BYTES: u64 = 64;

/// Bytes of the control page.
pub const CONTROL_PAGE_BYTES: u64 = 4096;
/// Offset of the timeline word (8 bytes) in the control page.
pub const TIMELINE_WORD_OFFSET: u64 = 0;
/// Bytes of the timeline word.
pub const TIMELINE_WORD_BYTES: u64 = 8;
/// Offset of the 32-bit half of the timeline word that holds its low bits: the futex word
/// a waiter sleeps on, which every release changes (successive values differ in their low
/// 32 bits) and whose writer wakes it ([`crate::futex`]).
pub const TIMELINE_FUTEX_OFFSET: u64 = TIMELINE_WORD_OFFSET + LOW_HALF_OFFSET;
/// Offset of the low 32 bits in a 64-bit word of this host's byte order.
pub const LOW_HALF_OFFSET: u64 = if cfg!(target_endian = "little") { 0 } else { 4 };
/// Offset of the client's last submitted value (8 bytes) in the control page.
pub const SUBMITTED_OFFSET: u64 = 64;
/// Bytes of the submitted value.
pub const SUBMITTED_BYTES: u64 = 8;
/// Offset of the lost flag (4 bytes) in the control page.
pub const LOST_OFFSET: u64 = 72;
/// Bytes of the lost flag.
pub const LOST_BYTES: u64 = 4;

const _: () = assert!(TIMELINE_WORD_OFFSET.is_multiple_of(CACHE_LINE_BYTES));
const _: () = assert!(TIMELINE_WORD_BYTES <= CACHE_LINE_BYTES);
const _: () = assert!(TIMELINE_FUTEX_OFFSET.is_multiple_of(4));
const _: () = assert!(TIMELINE_FUTEX_OFFSET + 4 <= TIMELINE_WORD_OFFSET + TIMELINE_WORD_BYTES);
// The word's line is its own: the client's submitted value starts the next line.
const _: () = assert!(SUBMITTED_OFFSET >= TIMELINE_WORD_OFFSET + CACHE_LINE_BYTES);
const _: () = assert!(SUBMITTED_OFFSET.is_multiple_of(8));
const _: () = assert!(LOST_OFFSET >= SUBMITTED_OFFSET + SUBMITTED_BYTES);
const _: () = assert!(LOST_OFFSET.is_multiple_of(4));
const _: () = assert!(LOST_OFFSET + LOST_BYTES <= CONTROL_PAGE_BYTES);
const _: () = assert!(CONTROL_PAGE_BYTES.is_multiple_of(4096));

/// Bytes of the positions page that follows a queue's ring.
pub const POSITIONS_PAGE_BYTES: u64 = 4096;
/// Offset of a queue's read position (8 bytes) past its ring.
pub const READ_AFTER_RING: u64 = 0;
/// Offset of a queue's write position (8 bytes) past its ring.
pub const WRITE_AFTER_RING: u64 = 64;

const _: () = assert!(READ_AFTER_RING.is_multiple_of(CACHE_LINE_BYTES));
// The queue writes the read position while the client writes the write position: a line each.
const _: () = assert!(WRITE_AFTER_RING >= READ_AFTER_RING + CACHE_LINE_BYTES);
const _: () = assert!(WRITE_AFTER_RING.is_multiple_of(8));
const _: () = assert!(WRITE_AFTER_RING + 8 <= POSITIONS_PAGE_BYTES);

/// The smallest ring anyone makes or accepts: 256 bytes, a power of two.
///
/// The command processor and the SDMA engine take a ring's base address in 256-byte units
/// (the base registers hold `address >> 8`), so 256 bytes is the grain rings are placed in;
/// a power of two of at least that holds whole AQL packets (four) and wraps on a dword.
/// rigd makes far larger rings (64 KiB at open); this bound is the one rig-proto's
/// `QueueShare::check`, the client and the simulator all enforce.
pub const MIN_RING_BYTES: u64 = RING_BASE_ALIGN;

/// The alignment of a ring's GPU address: the base registers hold `address >> 8`.
pub const RING_BASE_ALIGN: u64 = 256;

const _: () = assert!(MIN_RING_BYTES.is_power_of_two());
const _: () = assert!(MIN_RING_BYTES.is_multiple_of(AQL_POSITION_UNIT));

/// The smallest argument segment anyone makes or accepts: one page.
pub const MIN_SEGMENT_BYTES: u64 = 4096;

const _: () = assert!(MIN_SEGMENT_BYTES.is_power_of_two());

/// Bytes of one position unit of a PM4 queue: a dword.
pub const PM4_POSITION_UNIT: u64 = 4;
/// Bytes of one position unit of an SDMA queue: a byte.
pub const SDMA_POSITION_UNIT: u64 = 1;
/// Bytes of one position unit of an AQL queue: a 64-byte packet.
pub const AQL_POSITION_UNIT: u64 = 64;

/// Bytes of one doorbell slot: one cache line.
pub const DOORBELL_SLOT_BYTES: usize = crate::usize_of(CACHE_LINE_BYTES);
/// Offset of the 64-bit value in a doorbell slot.
pub const DOORBELL_VALUE_OFFSET: usize = 0;
/// Offset of the 32-bit sleeping futex word in a doorbell slot.
pub const DOORBELL_SLEEPING_OFFSET: usize = 8;
/// Bytes of a doorbell page.
pub const DOORBELL_PAGE_BYTES: usize = 4096;
/// Slots in a doorbell page.
pub const DOORBELLS_PER_PAGE: usize = DOORBELL_PAGE_BYTES / DOORBELL_SLOT_BYTES;

const _: () = assert!(DOORBELL_VALUE_OFFSET.is_multiple_of(8));
const _: () = assert!(DOORBELL_SLEEPING_OFFSET.is_multiple_of(4));
const _: () = assert!(DOORBELL_SLEEPING_OFFSET >= DOORBELL_VALUE_OFFSET + 8);
const _: () = assert!(DOORBELL_SLEEPING_OFFSET + 4 <= DOORBELL_SLOT_BYTES);
const _: () = assert!(DOORBELL_PAGE_BYTES.is_multiple_of(DOORBELL_SLOT_BYTES));
const _: () = assert!(DOORBELLS_PER_PAGE == 64);
