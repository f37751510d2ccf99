//! The compute offered to endpoints (`assets/hardware.json`), and the choice of the smallest that fits.

use std::path::Path;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

const BUILT_IN: &str = include_str!("../../assets/hardware.json");

/// The whole list, in the shape of `GET /v2/provider/{namespace}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HardwareList {
    pub vendors: Vec<Vendor>,
    /// The accelerators this server runs replicas on (see [`HardwareList::on_machine`]); none set: any.
    #[serde(skip)]
    pub runs_on: Option<Vec<String>>,
}

/// The accelerators this machine has: always `cpu`; `gpu` when an NVIDIA device is there; `neuron` when a
/// Neuron device is.
pub fn detected_accelerators() -> Vec<String> {
    let mut found = vec!["cpu".to_string()];
    if Path::new("/dev/nvidia0").exists() {
        found.push("gpu".into());
    }
    if Path::new("/dev/neuron0").exists() {
        found.push("neuron".into());
    }
    found
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Vendor {
    pub name: String,
    pub regions: Vec<Region>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub name: String,
    #[serde(default)]
    pub label: Option<String>,
    pub computes: Vec<Compute>,
}

/// One instance type and size in one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compute {
    pub id: String,
    /// cpu, gpu, neuron or zero_gpu.
    pub accelerator: String,
    pub instance_type: String,
    pub instance_size: String,
    pub architecture: String,
    pub num_accelerators: u32,
    #[serde(default)]
    pub num_cpus: Option<u32>,
    /// RAM of the instance.
    pub memory_gb: f64,
    /// Total accelerator memory of the instance (all its GPUs or Neuron cores); null on CPU.
    #[serde(default)]
    pub gpu_memory_gb: Option<f64>,
    pub price_per_hour: f64,
    /// `available` or `unavailable`.
    pub status: String,
    pub quota: Quota,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Quota {
    pub max_accelerators: u32,
    pub used_accelerators: u32,
}

/// A compute together with where it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement<'a> {
    pub vendor: &'a str,
    pub region: &'a str,
    pub compute: &'a Compute,
}

impl Compute {
    pub fn is_available(&self) -> bool {
        self.status == "available"
    }

    /// The memory a model runs from: accelerator memory where there is an accelerator, RAM on CPU.
    pub fn model_memory_gb(&self) -> f64 {
        match self.accelerator.as_str() {
            "cpu" => self.memory_gb,
            _ => self.gpu_memory_gb.unwrap_or(0.0),
        }
    }
}

impl HardwareList {
    pub fn built_in() -> Result<HardwareList, String> {
        HardwareList::parse(BUILT_IN)
    }

    pub fn load(path: Option<&Path>) -> Result<HardwareList, String> {
        match path {
            None => HardwareList::built_in(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("reading {}: {e}", p.display()))?;
                HardwareList::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
            }
        }
    }

    pub fn parse(text: &str) -> Result<HardwareList, String> {
        let list: HardwareList = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for p in list.placements() {
            let c = p.compute;
            if !["cpu", "gpu", "neuron", "zero_gpu"].contains(&c.accelerator.as_str()) {
                return Err(format!("{}: unknown accelerator {:?}", c.id, c.accelerator));
            }
            if !["available", "unavailable"].contains(&c.status.as_str()) {
                return Err(format!("{}: status must be available or unavailable", c.id));
            }
        }
        Ok(list)
    }

    /// The list as this server offers it: compute whose accelerator it cannot run (not in `accelerators`;
    /// `zero_gpu` counts as `gpu`) is `unavailable`, and so is GPU compute with more GPUs than the server
    /// places replicas on (`gpus`, when it knows of any).
    pub fn on_machine(mut self, accelerators: &[String], gpus: usize) -> HardwareList {
        for vendor in &mut self.vendors {
            for region in &mut vendor.regions {
                for c in &mut region.computes {
                    let too_many = gpus > 0
                        && runs(&["gpu".into()], &c.accelerator)
                        && c.num_accelerators as usize > gpus;
                    if !runs(accelerators, &c.accelerator) || too_many {
                        c.status = "unavailable".into();
                    }
                }
            }
        }
        self.runs_on = Some(accelerators.to_vec());
        self
    }

    /// Why this server cannot run `accelerator` replicas at all, if it cannot.
    pub fn cannot_run(&self, accelerator: &str) -> Option<String> {
        let have = self.runs_on.as_ref()?;
        (!runs(have, accelerator)).then(|| {
            format!(
                "this server runs no {accelerator} replicas (its accelerators: {}; runtime.accelerators)",
                have.join(", ")
            )
        })
    }

    pub fn placements(&self) -> impl Iterator<Item = Placement<'_>> {
        self.vendors.iter().flat_map(|v| {
            v.regions.iter().flat_map(move |r| {
                r.computes.iter().map(move |c| Placement {
                    vendor: &v.name,
                    region: &r.name,
                    compute: c,
                })
            })
        })
    }

    /// The compute an endpoint spec names, available or not.
    pub fn find(
        &self,
        vendor: &str,
        region: &str,
        accelerator: &str,
        instance_type: &str,
        instance_size: &str,
    ) -> Option<Placement<'_>> {
        self.placements().find(|p| {
            p.vendor == vendor
                && p.region == region
                && p.compute.accelerator == accelerator
                && p.compute.instance_type == instance_type
                && p.compute.instance_size == instance_size
        })
    }

    /// The cheapest available compute with this accelerator and at least this much model memory;
    /// the first listed wins a tie, so the choice is stable.
    pub fn smallest_fit(&self, accelerator: &str, memory_gb: f64) -> Option<Placement<'_>> {
        self.placements()
            .filter(|p| {
                p.compute.is_available()
                    && p.compute.accelerator == accelerator
                    && p.compute.model_memory_gb() >= memory_gb
            })
            .fold(None, |best: Option<Placement<'_>>, p| match best {
                Some(b) if b.compute.price_per_hour <= p.compute.price_per_hour => Some(b),
                _ => Some(p),
            })
    }
}

/// Whether `have` includes `accelerator` (`zero_gpu` runs where `gpu` does).
fn runs(have: &[String], accelerator: &str) -> bool {
    let wanted = if accelerator == "zero_gpu" {
        "gpu"
    } else {
        accelerator
    };
    have.iter().any(|a| a == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_list_is_valid_and_named_like_the_hosted_offering() {
        let hw = HardwareList::built_in().unwrap();
        let cpu = hw
            .find("aws", "us-east-1", "cpu", "intel-icl", "x1")
            .unwrap();
        assert!(cpu.compute.is_available());
        for t in [
            "nvidia-t4",
            "nvidia-l4",
            "nvidia-a10g",
            "nvidia-a100",
            "nvidia-h100",
        ] {
            assert!(hw.placements().any(|p| p.compute.instance_type == t), "{t}");
        }
        assert!(hw.placements().any(|p| p.compute.instance_type == "inf2"));
        let ids: std::collections::HashSet<_> = hw.placements().map(|p| &p.compute.id).collect();
        assert_eq!(ids.len(), hw.placements().count(), "ids are unique");
    }

    #[test]
    fn smallest_fit_takes_the_cheapest_that_is_large_enough() {
        let hw = HardwareList::built_in().unwrap();
        let small = hw.smallest_fit("gpu", 10.0).unwrap();
        assert!(small.compute.model_memory_gb() >= 10.0);
        for p in hw.placements() {
            let c = p.compute;
            if c.is_available() && c.accelerator == "gpu" && c.model_memory_gb() >= 10.0 {
                assert!(c.price_per_hour >= small.compute.price_per_hour);
            }
        }
        let cpu = hw.smallest_fit("cpu", 3.0).unwrap();
        assert!(cpu.compute.memory_gb >= 3.0);
        assert!(hw.smallest_fit("gpu", 100_000.0).is_none());
        assert!(hw.smallest_fit("tpu", 1.0).is_none());
    }

    #[test]
    fn unavailable_compute_is_never_chosen() {
        let mut hw = HardwareList::built_in().unwrap();
        for v in &mut hw.vendors {
            for r in &mut v.regions {
                for c in &mut r.computes {
                    if c.accelerator == "neuron" {
                        c.status = "unavailable".into();
                    }
                }
            }
        }
        assert!(hw.smallest_fit("neuron", 1.0).is_none());
    }

    #[test]
    fn compute_this_machine_cannot_run_is_unavailable() {
        let hw = HardwareList::built_in()
            .unwrap()
            .on_machine(&["cpu".to_string()], 0);
        assert!(hw.smallest_fit("gpu", 1.0).is_none());
        assert!(hw.smallest_fit("neuron", 1.0).is_none());
        assert!(hw.smallest_fit("cpu", 1.0).is_some());
        assert!(hw.placements().all(|p| p.compute.is_available()
            == (p.compute.accelerator == "cpu")
            || p.compute.accelerator == "cpu"));
        let why = hw.cannot_run("gpu").unwrap();
        assert!(
            why.contains("no gpu replicas") && why.contains("cpu"),
            "{why}"
        );
        assert_eq!(hw.cannot_run("cpu"), None);
        let gpus = HardwareList::built_in()
            .unwrap()
            .on_machine(&["cpu".into(), "gpu".into()], 0);
        assert!(gpus.smallest_fit("gpu", 1.0).is_some());
        assert_eq!(gpus.cannot_run("zero_gpu"), None);
        // The list as read from a file says nothing of the machine.
        assert_eq!(HardwareList::built_in().unwrap().cannot_run("neuron"), None);
    }

    #[test]
    fn bad_lists_are_rejected() {
        assert!(HardwareList::parse("{\"vendors\": 3}").is_err());
        let bad = BUILT_IN.replacen("\"available\"", "\"maybe\"", 1);
        assert!(HardwareList::parse(&bad).is_err());
    }
}
