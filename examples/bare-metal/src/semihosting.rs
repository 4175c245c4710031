//! Ends the run with an exit status through Arm semihosting (qemu's
//! `-semihosting-config enable=on`): SYS_EXIT with ADP_Stopped_ApplicationExit and the code.

use core::arch::asm;

const SYS_EXIT: u64 = 0x18;
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;

pub fn exit(code: u32) -> ! {
    let block = [ADP_STOPPED_APPLICATION_EXIT, code as u64];
    // SAFETY: the semihosting call reads the two-word block; qemu ends the machine.
    unsafe {
        asm!(
            "hlt #0xf000",
            in("x0") SYS_EXIT,
            in("x1") block.as_ptr(),
        );
    }
    loop {
        // SAFETY: waits for an event that never comes (semihosting off: the hlt trapped).
        unsafe { asm!("wfe") };
    }
}
