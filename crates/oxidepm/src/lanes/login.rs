//! Who the daemon is on the lanes' Redis, and where that is: the private
//! redis-server as `sys`, or a shared server (`[lanes] redis_url`) as the
//! admin user of `secrets/lanes_admin`, with the per-host users' names
//! qualified by this host's id.

use super::error::Error;
use super::handle::Lanes;
use super::server::{self as srv, Server};
use oxidepm_lanes::acl::AclUser;
use oxidepm_lanes::secret as secrets;
use oxidepm_lanes::Secret;

impl Lanes {
    /// Where the lanes' Redis is.
    pub fn server(&self) -> Server {
        match &self.settings.redis_url {
            Some(url) => Server::Shared {
                url: url.clone(),
                tls: self.settings.tls_files(),
            },
            None => Server::Private {
                socket: self.layout.redis_socket(),
            },
        }
    }

    /// Whether the lanes are on a shared server (`[lanes] redis_url`).
    pub fn is_shared(&self) -> bool {
        self.settings.redis_url.is_some()
    }

    /// The admin user and its password: `sys` on the private Redis, the
    /// person's user from `secrets/lanes_admin` on a shared one.
    pub(super) fn admin(&self) -> Result<(String, Secret), Error> {
        if self.is_shared() {
            let c = srv::read_admin_credential(&self.layout.secrets_dir())
                .map_err(Error::AdminCredential)?;
            return Ok((c.user, c.password));
        }
        let pw = Secret::read(&secrets::path(&self.layout.secrets_dir(), AclUser::Admin))
            .map_err(Error::NotSetUp)?;
        Ok((AclUser::Admin.to_string(), pw))
    }

    /// The name of `user` on the server: users that exist once per host
    /// (the bridge's, `[lanes] responders`') get `@<host id>` on a shared
    /// server; agents' and responder apps' names are unique through the
    /// registry.
    pub fn user_name(&self, user: &AclUser) -> String {
        let per_host = match user {
            AclUser::Bridge => true,
            AclUser::Responder(r) => self.settings.responders.contains(r),
            _ => false,
        };
        if per_host && self.is_shared() {
            format!("{user}@{}", self.host_id)
        } else {
            user.to_string()
        }
    }

    /// A keys connection as the admin user.
    pub(super) async fn connect_admin(&self) -> Result<srv::Con, Error> {
        let (user, pw) = self.admin()?;
        Ok(self.server().connect(&user, &pw).await?)
    }
}
