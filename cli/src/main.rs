fn main() {
    println!("smolrun");
}
