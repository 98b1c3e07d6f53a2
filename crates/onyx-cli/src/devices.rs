//! `onyx devices`.

use onyx::Result;

/// Lists the providers compiled in and their devices.
pub fn devices() -> Result<()> {
    for provider in onyx::compiled_providers() {
        println!("{}", provider.name());
        for d in provider.describe_devices() {
            println!("  {} — {}", d.device, d.name);
            for (k, v) in d.details {
                println!("    {k}: {v}");
            }
        }
    }
    Ok(())
}
