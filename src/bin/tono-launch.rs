//! `tono-launch`: started only by the tono-seal worker, as root; drops to
//! the plan's user, proves it, then runs the plan. See `tono_seal::launch::sequence`.
#![forbid(unsafe_code)]

fn main() {
    tono_seal::launch::sequence::main()
}
