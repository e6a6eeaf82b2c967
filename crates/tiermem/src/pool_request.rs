//! Huge page pool requests (`2M:512,1G:2`) and their parser; public as `hugepages::PoolRequest`.

use std::fmt;
use std::str::FromStr;
use tiermem_sys::hugetlb::HugePageSize;

/// A number of pages of one size: `2M:512`, `1G:2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct PoolRequest {
    /// Page size.
    pub size: HugePageSize,
    /// Pages.
    pub pages: u64,
}

impl FromStr for PoolRequest {
    type Err = String;

    fn from_str(s: &str) -> Result<PoolRequest, String> {
        let (size, pages) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: expected SIZE:PAGES, for example 2M:512 or 1G:2"))?;
        let size = match size.trim().to_ascii_uppercase().as_str() {
            "2M" | "2MB" | "2048K" => HugePageSize::Size2M,
            "1G" | "1GB" | "1024M" => HugePageSize::Size1G,
            other => return Err(format!("`{other}`: huge page size must be 2M or 1G")),
        };
        let pages = pages
            .trim()
            .parse()
            .map_err(|_| format!("`{pages}`: expected a page count"))?;
        Ok(PoolRequest { size, pages })
    }
}

impl fmt::Display for PoolRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.size, self.pages)
    }
}

impl From<PoolRequest> for String {
    fn from(r: PoolRequest) -> String {
        r.to_string()
    }
}

impl TryFrom<String> for PoolRequest {
    type Error = String;
    fn try_from(s: String) -> Result<PoolRequest, String> {
        s.parse()
    }
}

/// Parses a list of requests separated by commas or spaces.
pub fn parse_requests(s: &str) -> Result<Vec<PoolRequest>, String> {
    s.split([',', ' '])
        .filter(|p| !p.trim().is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_print() {
        let r: Vec<PoolRequest> = parse_requests("2M:512, 1g:2").unwrap();
        assert_eq!(
            r,
            vec![
                PoolRequest {
                    size: HugePageSize::Size2M,
                    pages: 512
                },
                PoolRequest {
                    size: HugePageSize::Size1G,
                    pages: 2
                }
            ]
        );
        assert_eq!(r[1].to_string(), "1G:2");
        for bad in ["2M", "4K:3", "2M:x", "1G:-1"] {
            assert!(bad.parse::<PoolRequest>().is_err(), "{bad}");
        }
    }
}
