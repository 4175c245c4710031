//! Output on qemu -M virt's PL011 UART (0x0900_0000): qemu needs no set-up to send; a real
//! PL011 would want its baud rate and line control set first.

use core::fmt;

const UART_BASE: usize = 0x0900_0000;
/// Data register and flag register offsets; FR bit 5: transmit FIFO full.
const DR: usize = 0x00;
const FR: usize = 0x18;
const TXFF: u32 = 1 << 5;

pub struct Uart;

impl Uart {
    pub fn write_byte(&mut self, b: u8) {
        // SAFETY: the PL011's registers, mapped as device memory by boot.rs.
        unsafe {
            while core::ptr::read_volatile((UART_BASE + FR) as *const u32) & TXFF != 0 {}
            core::ptr::write_volatile((UART_BASE + DR) as *mut u32, b as u32);
        }
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.bytes().for_each(|b| self.write_byte(b));
        Ok(())
    }
}

#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = write!($crate::uart::Uart, $($arg)*);
    }};
}

#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = writeln!($crate::uart::Uart, $($arg)*);
    }};
}
