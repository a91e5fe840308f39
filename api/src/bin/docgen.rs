//! Prints the API reference (`make docs` writes it to `docs/api-reference.md`).

fn main() {
    print!("{}", qdr_api::docs::reference(&qdr_api::docs::repository_examples()));
}
