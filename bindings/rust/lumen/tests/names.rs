//! `Debug` of the header's enumerations prints the constant's path, as a reader would write it.
use lumen::{
    Backend, ConvActivation, DType, Family, FeatureMap, Memory, Param, StateLayout, StatePart,
};

#[test]
fn known_values_print_their_names() {
    assert_eq!(format!("{:?}", Backend::CUDA), "Backend::CUDA");
    assert_eq!(format!("{:?}", Family::GATED_DELTA_NET), "Family::GATED_DELTA_NET");
    assert_eq!(format!("{:?}", FeatureMap::ELU1), "FeatureMap::ELU1");
    assert_eq!(format!("{:?}", DType::BFLOAT16), "DType::BFLOAT16");
    assert_eq!(format!("{:?}", Memory::DEVICE), "Memory::DEVICE");
    assert_eq!(format!("{:?}", Param::CONV_V_BIAS), "Param::CONV_V_BIAS");
    assert_eq!(format!("{:?}", StatePart::CONV_K), "StatePart::CONV_K");
    assert_eq!(format!("{:?}", StateLayout::FLA), "StateLayout::FLA");
    assert_eq!(format!("{:?}", ConvActivation::NONE), "ConvActivation::NONE");
    // Inside a derived Debug too.
    assert_eq!(format!("{:?}", Some(DType::FLOAT16)), "Some(DType::FLOAT16)");
}

#[test]
fn values_the_binding_does_not_name_print_their_number() {
    assert_eq!(format!("{:?}", Backend(42)), "Backend(42)");
    assert_eq!(format!("{:?}", Family(-1)), "Family(-1)");
}
