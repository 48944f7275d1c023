//! Adding a family is its folder and one line in `expertsim_serving::families!`: here the toy
//! family's folder (`toy_family_checks/toy/`) and its line below, through the same macro that
//! registers the real families, reach everything that lists families, which reads the
//! registration list: the registry's lookups, the erased `RegisteredFamily` the loader and the
//! runner use, `expertsim list`'s `family` group, docs/metrics.md's and docs/capacity.md's
//! generated spans, live mode's metadata and the families test's quick scenario. (The toy is a
//! test's, so its list is this module's `FAMILIES`, not the binary's; each check calls the
//! function the real list goes through.)

use crate::family::RegisteredFamily;
use crate::load_cache::LoadCache;
use crate::policies::Policies;
use crate::records::DiscardRecords;
use crate::registry::{self, families_in, named_in};
use std::path::Path;

// The one line.
expertsim_serving::families! {
    toy::Toy,
}

/// The toy family names no policy, so its runs never ask for one.
struct NoPolicies;

impl Policies for NoPolicies {
    fn batch_selector(
        &self,
        _: &crate::policies::batch::BatchSelectorConfig,
    ) -> Box<dyn crate::policies::batch::BatchSelector> {
        unreachable!("the toy family names no policy")
    }
    fn expert_mapper(
        &self,
        _: &crate::policies::mapping::MapperConfig,
    ) -> Box<dyn crate::policies::mapping::ExpertMapper> {
        unreachable!("the toy family names no policy")
    }
    fn placement(
        &self,
        _: &crate::policies::placement::PlacementConfig,
    ) -> Box<dyn crate::policies::placement::Placement> {
        unreachable!("the toy family names no policy")
    }
    fn aggregation_gate(
        &self,
        _: &crate::policies::gate::GateConfig,
    ) -> Box<dyn crate::policies::gate::AggregationGate> {
        unreachable!("the toy family names no policy")
    }
    fn queue_policy(
        &self,
        _: &crate::serving::QueuePolicyConfig,
    ) -> Box<dyn crate::serving::QueuePolicy> {
        unreachable!("the toy family names no policy")
    }
    fn router(&self, _: &crate::serving::RouterConfig) -> Box<dyn crate::serving::Router> {
        unreachable!("the toy family names no policy")
    }
    fn adapter_memory(
        &self,
        _: &crate::policies::memory::MemoryConfig,
    ) -> Box<dyn crate::policies::memory::AdapterMemory> {
        unreachable!("the toy family names no policy")
    }
}

/// The macro's line declared the toy's module (`family_modules` re-exports it, as `expertsim-scenario`'s root
/// re-exports the real ones) and registered it; the registry finds it by name there and not in
/// the real list, and the erased family reads its tables, validates a cell, bounds it and runs
/// it, as the scenario loader and the runner do.
#[test]
fn a_toy_family_is_reached_through_its_one_registration_line() {
    let _: &family_modules::toy::Toy = &toy::Toy;
    assert!(registry::family("toy").is_none());
    let family = named_in(FAMILIES, "toy").expect("the toy is registered");
    assert_eq!(family.name(), "toy");
    assert_eq!(family.metrics()[0].name, "served");
    let erased: &'static dyn RegisteredFamily = family.registered();
    let tables: toml::Value = toml::from_str("requests = 3.0").unwrap();
    let config = erased.deserialize(tables).unwrap();
    let cell = erased
        .validate(config, Path::new("."), &mut LoadCache::default())
        .unwrap();
    assert_eq!(cell.family(), family);
    assert_eq!(cell.get::<toy::ToyCell>().unwrap().requests, 3.0);
    assert_eq!(cell.demands()[0].value, 3.0);
    let run = erased
        .run(&cell, 7, &NoPolicies, &mut DiscardRecords)
        .unwrap();
    assert_eq!(run.output.scalar("served"), Some(10.0));
    // The toy's own checks and schema reach the loader's error path.
    let bad = erased
        .deserialize(toml::from_str("requests = -1.0").unwrap())
        .unwrap();
    let error = erased
        .validate(bad, Path::new("."), &mut LoadCache::default())
        .err()
        .unwrap();
    assert_eq!(error.path, "requests");
    assert!(
        erased
            .deserialize(toml::from_str("request = 3.0").unwrap())
            .is_err()
    );
}

/// What lists families reads the list: `expertsim list`'s group, the docs generators, live
/// mode's metadata (the toy has no live path, so it is refused by name without a line in
/// `live`) and the quick scenario the families test runs, a file in the toy's folder that the
/// toy's tables read as the loader hands them over.
#[test]
fn the_toy_family_reaches_the_listing_the_docs_and_its_quick_scenario() {
    let group = crate::scenario::options::family_group(families_in(FAMILIES));
    assert_eq!(
        group.kinds,
        [(
            "toy".to_string(),
            "a toy family (a test of the registry)".to_string()
        )]
    );
    let tables = registry::tests::metric_tables_markdown(families_in(FAMILIES));
    assert!(tables.starts_with("\n### toy\n"), "{tables}");
    assert!(
        tables.contains("| `served` | higher | requests served |"),
        "{tables}"
    );
    assert!(tables.contains("No per-request records."), "{tables}");
    assert_eq!(
        registry::tests::rate_keys_markdown(families_in(FAMILIES)),
        "`requests` for toy"
    );
    let family = named_in(FAMILIES, "toy").unwrap();
    assert!(!family.live());
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(family.quick_scenario());
    let mut document: toml::Table = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .parse()
        .unwrap();
    assert_eq!(document["family"].as_str(), Some("toy"));
    document.retain(|key, _| !crate::scenario::file::COMMON_KEYS.contains(&key));
    let erased = family.registered();
    let config = erased.deserialize(toml::Value::Table(document)).unwrap();
    let cell = erased
        .validate(config, Path::new("."), &mut LoadCache::default())
        .unwrap();
    assert_eq!(cell.get::<toy::ToyCell>().unwrap().requests, 3.0);
}
