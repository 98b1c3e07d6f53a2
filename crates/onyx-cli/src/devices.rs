//! `onyx devices`.

use onyx::Result;

/// Lists the providers compiled in and the devices each one sees.
pub fn devices() -> Result<()> {
    for (provider, devices) in onyx::compiled_devices() {
        println!("{provider}");
        if devices.is_empty() {
            println!("  (no device found)");
        }
        for d in devices {
            println!("  {} — {}", d.device, d.name);
            for (k, v) in d.details {
                println!("    {k}: {v}");
            }
        }
    }
    Ok(())
}
