//! After warm-up, a token of smolrun_generate allocates nothing: the forward pass, sampling,
//! the text decoder and the trip through the C callback. A counting global allocator reads the
//! count from inside the callback, at its 8th piece and at its last; this file holds a single
//! test, run from its own `main`, so that nothing else in the process allocates meanwhile.

use smolrun_ffi::engine::{smolrun_free, smolrun_generate, smolrun_open};
use smolrun_ffi::options::*;
use smolrun_ffi::smolrun_status::SMOLRUN_OK;
use smolrun_tests::counting_alloc::{allocations, CountingAllocator};
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::null_mut;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Pieces are counted, and the allocation count read at the 8th and at every later one.
#[derive(Default)]
struct Counts {
    pieces: usize,
    at_warm: usize,
    at_last: usize,
}

const WARM_UP: usize = 8;

unsafe extern "C" fn count(_: *const c_char, _: usize, user_data: *mut c_void) -> c_int {
    let counts = unsafe { &mut *(user_data as *mut Counts) };
    counts.pieces += 1;
    if counts.pieces == WARM_UP {
        counts.at_warm = allocations();
    }
    counts.at_last = allocations();
    0
}

fn main() {
    let path = smolrun_tests::model_path("gemma3-270m");
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut engine = null_mut();
    unsafe {
        let options = smolrun_options_new();
        smolrun_options_set_context(options, 512);
        smolrun_options_set_threads(options, 2);
        assert_eq!(
            smolrun_open(path.as_ptr(), options, &mut engine),
            SMOLRUN_OK
        );
        smolrun_options_free(options);
    }
    // Greedy and sampled (temperature 0.8: the default chain with its penalties).
    for temperature in [0.0f32, 0.8] {
        let mut counts = Counts::default();
        let status = unsafe {
            smolrun_generate(
                engine,
                c"Once upon a time, in a small village by the sea,".as_ptr(),
                96,
                temperature,
                7,
                Some(count),
                (&mut counts as *mut Counts).cast(),
                null_mut(),
            )
        };
        assert_eq!(status, SMOLRUN_OK);
        assert!(
            counts.pieces >= WARM_UP + 48,
            "only {} pieces at temperature {temperature}: too few to measure",
            counts.pieces
        );
        let allocated = counts.at_last - counts.at_warm;
        assert_eq!(
            allocated,
            0,
            "{allocated} allocations over {} tokens after warm-up (temperature {temperature})",
            counts.pieces - WARM_UP
        );
        println!(
            "generate_no_alloc: temperature {temperature}: {} pieces, none allocated after the {WARM_UP}th",
            counts.pieces
        );
    }
    unsafe { smolrun_free(engine) };
    println!("generate_no_alloc: ok");
}
