//! Compiles the kubelet's device-plugin API (`proto/api.proto`) and the part of its
//! pod-resources API the plugin reads (`proto/podresources.proto`) with protox, a protobuf
//! compiler in Rust, so that no system `protoc` is needed, then generates the messages
//! (prost) and both sides of the services (tonic): the plugin serves `DevicePlugin` and
//! calls `PodResourcesLister`, and the tests' kubelet serves `Registration` and
//! `PodResourcesLister`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/podresources.proto");
    let files = protox::compile(["api.proto", "podresources.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(files)?;
    Ok(())
}
